-- 0001 in PostgreSQL's dialect: the same tables, columns and constraints as
-- ../0001_init.sql, which says what they are for. Translation rules, for
-- every file here: INTEGER is BIGINT (SQLite's INTEGER holds 64 bits; 0/1
-- flags stay integers, as the Go code writes and compares them); an
-- INTEGER PRIMARY KEY AUTOINCREMENT is a BIGINT identity, never reused;
-- times stay TEXT in the fixed-width UTC layout, so the same Go code reads
-- both and comparing strings still compares instants (the database is
-- created with the C collation). Migrations are append-only here too.

CREATE TABLE sessions (
	id              TEXT PRIMARY KEY,
	title           TEXT NOT NULL DEFAULT '',
	parent_id       TEXT REFERENCES sessions (id),
	forked_from_seq BIGINT,
	created_at      TEXT NOT NULL,
	updated_at      TEXT NOT NULL
);

CREATE TABLE runs (
	id                 TEXT PRIMARY KEY,
	kind               TEXT NOT NULL CHECK (kind IN ('run', 'harness')),
	session_id         TEXT,
	status             TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'interrupted', 'cancelled')),
	prompt             TEXT NOT NULL DEFAULT '',
	workspace          TEXT NOT NULL DEFAULT '',
	model              TEXT NOT NULL DEFAULT '',
	config_json        TEXT,
	result             TEXT NOT NULL DEFAULT '',
	reason             TEXT NOT NULL DEFAULT '',
	exit_code          BIGINT NOT NULL DEFAULT 0,
	turns              BIGINT NOT NULL DEFAULT 0,
	prompt_tokens      BIGINT NOT NULL DEFAULT 0,
	completion_tokens  BIGINT NOT NULL DEFAULT 0,
	iteration_count    BIGINT NOT NULL DEFAULT 0,
	max_iterations     BIGINT NOT NULL DEFAULT 0,
	completion_promise TEXT NOT NULL DEFAULT '',
	lease_owner        TEXT,
	lease_expires_at   TEXT,
	lease_heartbeat_at TEXT,
	created_at         TEXT NOT NULL,
	updated_at         TEXT NOT NULL,
	finished_at        TEXT
);

CREATE INDEX runs_created_at ON runs (created_at);

CREATE TABLE messages (
	id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	seq             BIGINT NOT NULL,
	iteration       BIGINT NOT NULL DEFAULT 0,
	role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
	content         TEXT NOT NULL DEFAULT '',
	tool_calls_json TEXT,
	tool_call_id    TEXT,
	created_at      TEXT NOT NULL
);

CREATE INDEX messages_run ON messages (run_id, id);

CREATE TABLE tool_calls (
	run_id       TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	call_id      TEXT NOT NULL,
	name         TEXT NOT NULL DEFAULT '',
	args_json    TEXT,
	status       TEXT NOT NULL CHECK (status IN ('started', 'completed', 'failed')),
	output       TEXT NOT NULL DEFAULT '',
	error        TEXT NOT NULL DEFAULT '',
	truncated    BIGINT NOT NULL DEFAULT 0,
	started_at   TEXT,
	completed_at TEXT,
	PRIMARY KEY (run_id, call_id)
);

CREATE TABLE events (
	id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	session_id TEXT,
	seq        BIGINT NOT NULL,
	ts         TEXT NOT NULL,
	type       TEXT NOT NULL,
	phase_id   TEXT,
	attempt    BIGINT,
	data       TEXT,
	UNIQUE (run_id, seq)
);

CREATE INDEX events_session ON events (session_id, id);
