-- 0015 in PostgreSQL's dialect (see ../0015_attempt_queue.sql).
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
