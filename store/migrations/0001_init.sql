-- 0001: run state. Plan state, receipts, checkpoints and jobs come in later
-- migrations. Migrations are append-only: never edit one that has shipped.
-- Times are TEXT in the fixed-width UTC layout 2006-01-02T15:04:05.000000Z,
-- so comparing strings compares instants.

CREATE TABLE sessions (
	id              TEXT PRIMARY KEY,
	title           TEXT NOT NULL DEFAULT '',
	parent_id       TEXT REFERENCES sessions (id),
	forked_from_seq INTEGER,
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
	exit_code          INTEGER NOT NULL DEFAULT 0,
	turns              INTEGER NOT NULL DEFAULT 0,
	prompt_tokens      INTEGER NOT NULL DEFAULT 0,
	completion_tokens  INTEGER NOT NULL DEFAULT 0,
	iteration_count    INTEGER NOT NULL DEFAULT 0,
	max_iterations     INTEGER NOT NULL DEFAULT 0,
	completion_promise TEXT NOT NULL DEFAULT '',
	lease_owner        TEXT,
	lease_expires_at   TEXT,
	lease_heartbeat_at TEXT,
	created_at         TEXT NOT NULL,
	updated_at         TEXT NOT NULL,
	finished_at        TEXT
);

CREATE INDEX runs_created_at ON runs (created_at);

-- messages is the conversation, projected from message.completed and
-- tool.completed events; seq points back at the event.
CREATE TABLE messages (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	seq             INTEGER NOT NULL,
	iteration       INTEGER NOT NULL DEFAULT 0,
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
	truncated    INTEGER NOT NULL DEFAULT 0,
	started_at   TEXT,
	completed_at TEXT,
	PRIMARY KEY (run_id, call_id)
);

-- events is the journal; everything above is a projection of it.
CREATE TABLE events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	session_id TEXT,
	seq        INTEGER NOT NULL,
	ts         TEXT NOT NULL,
	type       TEXT NOT NULL,
	phase_id   TEXT,
	attempt    INTEGER,
	data       TEXT,
	UNIQUE (run_id, seq)
);

CREATE INDEX events_session ON events (session_id, id);
