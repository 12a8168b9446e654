-- 0013: the run queue of `agent worker` (DESIGN.md §14). A gateway whose
-- runs workers drive creates them waiting (queue = 'waiting', no lease);
-- a worker claims one by taking its lease (queue = 'claimed'), and another
-- worker takes over a claimed run whose lease expired. Runs nobody queued
-- (the CLI's, a local gateway's) have no queue and are never taken over by
-- a worker. stop_request is a gateway asking the run's worker to stop it:
-- 'cancel' for good, 'interrupt' resumably.
ALTER TABLE runs ADD COLUMN queue TEXT CHECK (queue IN ('waiting', 'claimed'));
ALTER TABLE runs ADD COLUMN queued_at TEXT;
ALTER TABLE runs ADD COLUMN stop_request TEXT CHECK (stop_request IN ('cancel', 'interrupt'));
CREATE INDEX runs_waiting ON runs (queued_at) WHERE queue = 'waiting';
