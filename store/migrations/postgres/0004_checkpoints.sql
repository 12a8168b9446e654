-- 0004 in PostgreSQL's dialect (see ../0004_checkpoints.sql).
-- Types are translated as 0001_init.sql here says.

CREATE TABLE checkpoints (
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	number     BIGINT NOT NULL,
	seq        BIGINT NOT NULL,
	phase_id   TEXT NOT NULL DEFAULT '',
	attempt    BIGINT NOT NULL DEFAULT 0,
	call_id    TEXT NOT NULL DEFAULT '',
	tool       TEXT NOT NULL DEFAULT '',
	path       TEXT NOT NULL,
	blob       TEXT NOT NULL DEFAULT '',
	existed    BIGINT NOT NULL,
	mode       BIGINT NOT NULL DEFAULT 0,
	bytes      BIGINT NOT NULL DEFAULT 0,
	created_at TEXT NOT NULL,
	PRIMARY KEY (run_id, number)
);

