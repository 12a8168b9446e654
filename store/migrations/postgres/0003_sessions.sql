-- 0003 in PostgreSQL's dialect (see ../0003_sessions.sql).
-- Types are translated as 0001_init.sql here says.

CREATE UNIQUE INDEX events_session_seq ON events (session_id, seq) WHERE session_id IS NOT NULL;

-- idempotency_key makes run.start safe to retry: one run per key and
-- session. reclaims counts how often a rescuer took over the run after
-- its process died, so a run that keeps killing its process can be given up.
ALTER TABLE runs ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN reclaims BIGINT NOT NULL DEFAULT 0;

CREATE UNIQUE INDEX runs_idempotency ON runs (session_id, idempotency_key) WHERE idempotency_key != '';
CREATE INDEX runs_session ON runs (session_id, created_at);

-- The rescuer scans running runs, oldest first, often; finished ones are
-- most of the table.
CREATE INDEX runs_running ON runs (created_at) WHERE status = 'running';

-- Session lists are newest activity first.
CREATE INDEX sessions_updated_at ON sessions (updated_at, id);
