-- 0016: runs that wait for a person or a time (docs/PROTOCOL.md#waits).
-- A run's status may be 'waiting': SQLite cannot alter a CHECK constraint,
-- so the table's definition is edited in place, as SQLite's documentation
-- allows for a change that leaves every stored row valid (the migration
-- runner bumps schema_version after a migration that does this).
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''interrupted'', ''cancelled'')', '''interrupted'', ''cancelled'', ''waiting'')')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;

-- One row per wait, inserted by the projection of its first run.waiting
-- and resolved once (outcome set): the first answer wins, by a
-- conditional UPDATE, whichever process gives it. journaled is set when
-- the run's journal records its wait.resolved, which the driver that
-- continues the run does.
CREATE TABLE waits (
  run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  wait_id     TEXT NOT NULL,
  seq         INTEGER NOT NULL,
  phase_id    TEXT NOT NULL DEFAULT '',
  kind        TEXT NOT NULL,
  call_id     TEXT NOT NULL DEFAULT '',
  until_at    TEXT NOT NULL,
  data        TEXT NOT NULL,
  outcome     TEXT,
  resolution  TEXT,
  resolved_at TEXT,
  journaled   INTEGER NOT NULL DEFAULT 0,
  created_at  TEXT NOT NULL,
  PRIMARY KEY (run_id, wait_id)
);
CREATE INDEX waits_open ON waits (until_at) WHERE outcome IS NULL;
CREATE INDEX waits_answered ON waits (run_id) WHERE outcome IS NOT NULL AND journaled = 0;
