-- 0004: checkpoints, projected from checkpoint.created. Each is a file as
-- it was before the run first changed it; its content is the blob (sha256)
-- in $AGENT_HOME/blobs, '' when the file did not exist. number counts a
-- run's checkpoints 1, 2, 3… in the order they were recorded, and is what
-- `agent rewind --to N` names; seq points back at the event.
CREATE TABLE checkpoints (
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	number     INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	phase_id   TEXT NOT NULL DEFAULT '',
	attempt    INTEGER NOT NULL DEFAULT 0,
	call_id    TEXT NOT NULL DEFAULT '',
	tool       TEXT NOT NULL DEFAULT '',
	path       TEXT NOT NULL,
	blob       TEXT NOT NULL DEFAULT '',
	existed    INTEGER NOT NULL,
	mode       INTEGER NOT NULL DEFAULT 0,
	bytes      INTEGER NOT NULL DEFAULT 0,
	created_at TEXT NOT NULL,
	PRIMARY KEY (run_id, number)
);

