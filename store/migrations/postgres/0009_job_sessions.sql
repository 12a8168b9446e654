-- 0009 in PostgreSQL's dialect (see ../0009_job_sessions.sql).
-- Types are translated as 0001_init.sql here says.

ALTER TABLE sessions ADD COLUMN job_id TEXT;

-- Sessions made before this migration: none in a PostgreSQL store, which
-- starts from the whole list; kept so both lists do the same.
UPDATE sessions SET job_id = COALESCE((
	SELECT job_runs.job_id FROM runs JOIN job_runs ON job_runs.id = substr(runs.idempotency_key, 9)
	WHERE runs.session_id = sessions.id AND runs.idempotency_key LIKE 'job-run:%' LIMIT 1), '')
WHERE title LIKE 'job % · %' AND parent_id IS NULL
	AND EXISTS (SELECT 1 FROM runs WHERE runs.session_id = sessions.id AND runs.idempotency_key LIKE 'job-run:%');
