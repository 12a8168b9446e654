-- 0011: retention (DESIGN.md §12). `agent prune` removes the message
-- deltas and tool outputs of finished runs (store/prune.go says exactly
-- what). pruned_at says when, so `runs show` can say so; a failed run
-- resumed after it was pruned and finished again is pruned again
-- (finished_at > pruned_at).
ALTER TABLE runs ADD COLUMN pruned_at TEXT;

-- pruned_deltas are the seqs of a session's message.delta events that
-- prune deleted, as spans of consecutive seqs within one phase attempt.
-- A session's replay promises seqs with no gap, so it sends a placeholder
-- delta for each of them (ListSessionEvents).
CREATE TABLE pruned_deltas (
	session_id TEXT NOT NULL,
	seq_from   INTEGER NOT NULL,
	seq_to     INTEGER NOT NULL,
	run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	phase_id   TEXT NOT NULL DEFAULT '',
	attempt    INTEGER NOT NULL DEFAULT 0,
	ts         TEXT NOT NULL, -- of the span's first delta
	PRIMARY KEY (session_id, seq_from)
);
