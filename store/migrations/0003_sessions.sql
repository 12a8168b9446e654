-- 0003: gateway sessions. A session's events share one sequence, so seq is
-- unique per session as well as per run (a run's seqs are a subsequence of
-- its session's, hence still strictly increasing). Events outside a
-- session have a NULL session_id and are not constrained here.

CREATE UNIQUE INDEX events_session_seq ON events (session_id, seq) WHERE session_id IS NOT NULL;

-- idempotency_key makes run.start safe to retry: one run per key and
-- session. reclaims counts how often a rescuer took over the run after
-- its process died, so a run that keeps killing its process can be given up.
ALTER TABLE runs ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN reclaims INTEGER NOT NULL DEFAULT 0;

CREATE UNIQUE INDEX runs_idempotency ON runs (session_id, idempotency_key) WHERE idempotency_key != '';
CREATE INDEX runs_session ON runs (session_id, created_at);

-- The rescuer scans running runs, oldest first, often; finished ones are
-- most of the table.
CREATE INDEX runs_running ON runs (created_at) WHERE status = 'running';

-- Session lists are newest activity first.
CREATE INDEX sessions_updated_at ON sessions (updated_at, id);
