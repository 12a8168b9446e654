-- 0002 in PostgreSQL's dialect (see ../0002_plan_state.sql).
-- Types are translated as 0001_init.sql here says.

CREATE TABLE plans (
	run_id       TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
	objective    TEXT NOT NULL DEFAULT '',
	mission_json TEXT NOT NULL,
	created_at   TEXT NOT NULL,
	updated_at   TEXT NOT NULL
);

-- phases are the plan's phases in plan order (idx). attempts is the highest
-- attempt number started; attempts - budget_base is what counts against
-- max_attempts, so a resume can grant a failed phase a fresh budget.
CREATE TABLE phases (
	run_id          TEXT NOT NULL REFERENCES plans (run_id) ON DELETE CASCADE,
	id              TEXT NOT NULL,
	idx             BIGINT NOT NULL,
	title           TEXT NOT NULL DEFAULT '',
	status          TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
	attempts        BIGINT NOT NULL DEFAULT 0,
	budget_base     BIGINT NOT NULL DEFAULT 0,
	max_attempts    BIGINT NOT NULL,
	depends_on_json TEXT NOT NULL DEFAULT '[]',
	spec_json       TEXT NOT NULL,
	output          TEXT NOT NULL DEFAULT '',
	started_at      TEXT,
	completed_at    TEXT,
	updated_at      TEXT NOT NULL,
	PRIMARY KEY (run_id, id)
);

CREATE TABLE phase_attempts (
	run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id          TEXT NOT NULL,
	attempt           BIGINT NOT NULL,
	status            TEXT NOT NULL CHECK (status IN ('running', 'passed', 'failed', 'crashed', 'timeout', 'interrupted', 'cancelled')),
	reason            TEXT NOT NULL DEFAULT '',
	reasons_json      TEXT,
	output            TEXT NOT NULL DEFAULT '',
	prompt_tokens     BIGINT NOT NULL DEFAULT 0,
	completion_tokens BIGINT NOT NULL DEFAULT 0,
	duration_ms       BIGINT NOT NULL DEFAULT 0,
	started_at        TEXT,
	finished_at       TEXT,
	PRIMARY KEY (run_id, phase_id, attempt)
);

-- artifacts are files tools wrote; phase_id is '' and attempt 0 on the
-- fast path, which has no phases.
CREATE TABLE artifacts (
	id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id   TEXT NOT NULL DEFAULT '',
	attempt    BIGINT NOT NULL DEFAULT 0,
	path       TEXT NOT NULL,
	sha256     TEXT NOT NULL DEFAULT '',
	bytes      BIGINT NOT NULL DEFAULT 0,
	created_at TEXT NOT NULL
);

CREATE INDEX artifacts_phase ON artifacts (run_id, phase_id);

-- receipts is the side-effect outbox: an intent is written 'pending'
-- before the effect starts and becomes 'done' when its receipt.recorded is
-- persisted; 'unknown' means it may or may not have happened. The key is
-- the idempotency key, unique across all runs.
CREATE TABLE receipts (
	key          TEXT PRIMARY KEY,
	run_id       TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id     TEXT NOT NULL DEFAULT '',
	attempt      BIGINT NOT NULL DEFAULT 0,
	tool         TEXT NOT NULL DEFAULT '',
	type         TEXT NOT NULL DEFAULT '',
	state        TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unknown')),
	details_json TEXT,
	created_at   TEXT NOT NULL,
	updated_at   TEXT NOT NULL
);

CREATE INDEX receipts_phase ON receipts (run_id, phase_id);

-- guardrails and learnings are reinjected into later attempts and phases.
CREATE TABLE guardrails (
	id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id   TEXT NOT NULL DEFAULT '',
	attempt    BIGINT NOT NULL DEFAULT 0,
	kind       TEXT NOT NULL CHECK (kind IN ('failed_approach', 'verification')),
	text       TEXT NOT NULL,
	created_at TEXT NOT NULL
);

CREATE INDEX guardrails_phase ON guardrails (run_id, phase_id);

CREATE TABLE learnings (
	id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id   TEXT NOT NULL DEFAULT '',
	attempt    BIGINT NOT NULL DEFAULT 0,
	text       TEXT NOT NULL,
	created_at TEXT NOT NULL
);

CREATE INDEX learnings_run ON learnings (run_id);

-- verifications keeps each verification's findings as the event carried them.
CREATE TABLE verifications (
	id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id      TEXT NOT NULL DEFAULT '',
	attempt       BIGINT NOT NULL DEFAULT 0,
	status        TEXT NOT NULL DEFAULT '',
	evidence_type TEXT NOT NULL DEFAULT '',
	findings_json TEXT NOT NULL,
	path          TEXT NOT NULL DEFAULT '',
	created_at    TEXT NOT NULL
);

CREATE INDEX verifications_run ON verifications (run_id);
