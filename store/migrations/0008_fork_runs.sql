-- 0008: a forked session's copied conversation is held by a synthetic run
-- (store/forks.go) that no model drove. fork marks it, so run lists leave
-- it out while the session's history still reads through it.

ALTER TABLE runs ADD COLUMN fork INTEGER NOT NULL DEFAULT 0;

-- Forks made before this migration: the first run of a forked session,
-- inserted by ForkSession with its fixed prompt and no model or options.
UPDATE runs SET fork = 1
WHERE kind = 'run' AND model = '' AND config_json IS NULL AND lease_owner IS NULL
	AND prompt LIKE 'forked from session % at seq %'
	AND session_id IN (SELECT id FROM sessions WHERE parent_id IS NOT NULL)
	AND NOT EXISTS (
		SELECT 1 FROM runs AS earlier
		WHERE earlier.session_id = runs.session_id
			AND (earlier.created_at < runs.created_at
				OR earlier.created_at = runs.created_at AND earlier.rowid < runs.rowid));
