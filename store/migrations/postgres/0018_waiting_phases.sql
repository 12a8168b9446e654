-- 0018 in PostgreSQL's dialect (see ../0018_waiting_phases.sql).
ALTER TABLE waits ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;

ALTER TABLE phases DROP CONSTRAINT phases_status_check;
ALTER TABLE phases ADD CONSTRAINT phases_status_check
  CHECK (status IN ('pending', 'running', 'completed', 'failed', 'waiting'));
ALTER TABLE phase_attempts DROP CONSTRAINT phase_attempts_status_check;
ALTER TABLE phase_attempts ADD CONSTRAINT phase_attempts_status_check
  CHECK (status IN ('running', 'passed', 'failed', 'crashed', 'timeout', 'interrupted', 'cancelled', 'waiting'));
ALTER TABLE job_runs DROP CONSTRAINT job_runs_status_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_status_check
  CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'skipped', 'waiting'));
