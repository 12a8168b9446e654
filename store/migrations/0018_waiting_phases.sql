-- 0018: a harness phase waits too, and so does a scheduled job's run
-- (docs/PROTOCOL.md#waits). A wait names the attempt of the phase that asked
-- it; a phase, its attempt and a job run may be 'waiting'. As 0016 did for
-- runs, the CHECK constraints are edited in place (every stored row stays
-- valid).
ALTER TABLE waits ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;

PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''completed'', ''failed'')', '''completed'', ''failed'', ''waiting'')')
WHERE type = 'table' AND name = 'phases';
UPDATE sqlite_master
SET sql = replace(sql, '''interrupted'', ''cancelled'')', '''interrupted'', ''cancelled'', ''waiting'')')
WHERE type = 'table' AND name = 'phase_attempts';
UPDATE sqlite_master
SET sql = replace(sql, '''cancelled'', ''skipped'')', '''cancelled'', ''skipped'', ''waiting'')')
WHERE type = 'table' AND name = 'job_runs';
PRAGMA writable_schema = OFF;
