-- 0015: harness phase attempts as units of work (DESIGN.md §14). A worker
-- driving a harness run queues each phase attempt here instead of starting
-- its child itself; any worker claims it (holder, lease_expires_at), runs
-- the child, writes its events and intents fenced by this row, and leaves
-- its result for the harness to read. The harness deletes the row once it
-- has the result; a harness that starts again deletes the rows it left,
-- which fences out their workers. stop_request is the harness asking the
-- holder to stop the attempt. spec_json is the child's spec and limits:
-- no secrets (they travel in the environment).
CREATE TABLE attempt_queue (
  run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  phase_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  session_id TEXT,
  spec_json TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('waiting', 'claimed', 'done')),
  holder TEXT,
  lease_expires_at TEXT,
  stop_request TEXT,
  result_json TEXT,
  queued_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (run_id, phase_id, attempt)
);
CREATE INDEX attempt_queue_waiting ON attempt_queue (queued_at) WHERE state = 'waiting';
