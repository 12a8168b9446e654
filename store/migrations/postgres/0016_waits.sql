-- 0016: runs that wait for a person or a time (docs/PROTOCOL.md#waits).
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
  CHECK (status IN ('running', 'completed', 'failed', 'interrupted', 'cancelled', 'waiting'));

CREATE TABLE waits (
  run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  wait_id     TEXT NOT NULL,
  seq         BIGINT NOT NULL,
  phase_id    TEXT NOT NULL DEFAULT '',
  kind        TEXT NOT NULL,
  call_id     TEXT NOT NULL DEFAULT '',
  until_at    TEXT NOT NULL,
  data        TEXT NOT NULL,
  outcome     TEXT,
  resolution  TEXT,
  resolved_at TEXT,
  journaled   INTEGER NOT NULL DEFAULT 0,
  created_at  TEXT NOT NULL,
  PRIMARY KEY (run_id, wait_id)
);
CREATE INDEX waits_open ON waits (until_at) WHERE outcome IS NULL;
CREATE INDEX waits_answered ON waits (run_id) WHERE outcome IS NOT NULL AND journaled = 0;
