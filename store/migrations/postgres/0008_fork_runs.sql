-- 0008 in PostgreSQL's dialect (see ../0008_fork_runs.sql).
-- Types are translated as 0001_init.sql here says.

ALTER TABLE runs ADD COLUMN fork BIGINT NOT NULL DEFAULT 0;

-- Forks made before this migration. A PostgreSQL store starts from the
-- whole list of migrations, so it has none; the UPDATE is kept so both
-- lists do the same. PostgreSQL has no rowid (SQLite's order of insertion),
-- so a tie on created_at is broken by id instead.
UPDATE runs SET fork = 1
WHERE kind = 'run' AND model = '' AND config_json IS NULL AND lease_owner IS NULL
	AND prompt LIKE 'forked from session % at seq %'
	AND session_id IN (SELECT id FROM sessions WHERE parent_id IS NOT NULL)
	AND NOT EXISTS (
		SELECT 1 FROM runs AS earlier
		WHERE earlier.session_id = runs.session_id
			AND (earlier.created_at < runs.created_at
				OR earlier.created_at = runs.created_at AND earlier.id < runs.id));
