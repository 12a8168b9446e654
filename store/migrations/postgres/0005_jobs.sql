-- 0005 in PostgreSQL's dialect (see ../0005_jobs.sql).
-- Types are translated as 0001_init.sql here says.

CREATE TABLE scheduled_jobs (
	id                TEXT PRIMARY KEY,
	name              TEXT NOT NULL UNIQUE,
	cron_expr         TEXT NOT NULL,
	timezone          TEXT NOT NULL,
	enabled           BIGINT NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
	target_session_id TEXT,
	prompt_template   TEXT NOT NULL,
	policy_json       TEXT NOT NULL DEFAULT '{}',
	created_at        TEXT NOT NULL,
	updated_at        TEXT NOT NULL,
	last_run_at       TEXT,
	next_run_at       TEXT NOT NULL
);

CREATE INDEX scheduled_jobs_due ON scheduled_jobs (enabled, next_run_at);

-- job_runs has one row per attempt of a tick. A tick is (job_id,
-- scheduled_for); inserting its attempt-1 row claims it, and the unique
-- key makes a second claim fail, so a tick runs at most once even across
-- restarts. Retries are attempts 2, 3… of the same tick. run_id is '' until
-- the run is dispatched. The unique key also serves (job_id, scheduled_for)
-- lookups.
CREATE TABLE job_runs (
	id            TEXT PRIMARY KEY,
	job_id        TEXT NOT NULL REFERENCES scheduled_jobs (id) ON DELETE CASCADE,
	run_id        TEXT NOT NULL DEFAULT '',
	scheduled_for TEXT NOT NULL,
	started_at    TEXT,
	completed_at  TEXT,
	status        TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'skipped')),
	attempt       BIGINT NOT NULL DEFAULT 1 CHECK (attempt >= 1),
	error_text    TEXT,
	UNIQUE (job_id, scheduled_for, attempt)
);

CREATE INDEX job_runs_status ON job_runs (status, started_at);
