-- 0013 in PostgreSQL's dialect (see ../0013_run_queue.sql).
ALTER TABLE runs ADD COLUMN queue TEXT CHECK (queue IN ('waiting', 'claimed'));
ALTER TABLE runs ADD COLUMN queued_at TEXT;
ALTER TABLE runs ADD COLUMN stop_request TEXT CHECK (stop_request IN ('cancel', 'interrupt'));
CREATE INDEX runs_waiting ON runs (queued_at) WHERE queue = 'waiting';
