-- 0011 in PostgreSQL's dialect (see ../0011_prune.sql).
-- Types are translated as 0001_init.sql here says.

ALTER TABLE runs ADD COLUMN pruned_at TEXT;

-- pruned_deltas are the seqs of a session's message.delta events that
-- prune deleted, as spans of consecutive seqs within one phase attempt.
-- A session's replay promises seqs with no gap, so it sends a placeholder
-- delta for each of them (ListSessionEvents).
CREATE TABLE pruned_deltas (
	session_id TEXT NOT NULL,
	seq_from   BIGINT NOT NULL,
	seq_to     BIGINT NOT NULL,
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id   TEXT NOT NULL DEFAULT '',
	attempt    BIGINT NOT NULL DEFAULT 0,
	ts         TEXT NOT NULL, -- of the span's first delta
	PRIMARY KEY (session_id, seq_from)
);
