-- 0009: a session a scheduled job's tick created for itself names the job,
-- so session lists can leave those out by default: one job firing every
-- minute would otherwise bury the sessions people opened.

ALTER TABLE sessions ADD COLUMN job_id TEXT;

-- Sessions made before this migration: the gateway titled each one
-- "job NAME · TIME" and started the tick's run in it under the key
-- "job-run:JOB_RUN_ID". A job deleted since took its job_runs rows with
-- it; its sessions get '' — not NULL, so they are still left out.
UPDATE sessions SET job_id = COALESCE((
	SELECT job_runs.job_id FROM runs JOIN job_runs ON job_runs.id = substr(runs.idempotency_key, 9)
	WHERE runs.session_id = sessions.id AND runs.idempotency_key LIKE 'job-run:%' LIMIT 1), '')
WHERE title LIKE 'job % · %' AND parent_id IS NULL
	AND EXISTS (SELECT 1 FROM runs WHERE runs.session_id = sessions.id AND runs.idempotency_key LIKE 'job-run:%');
