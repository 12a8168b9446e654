-- 0020 in PostgreSQL's dialect (see ../0020_subagents.sql).
ALTER TABLE runs ADD COLUMN parent_run_id TEXT REFERENCES runs (id) ON DELETE CASCADE;
ALTER TABLE runs ADD COLUMN parent_call TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN description TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_parent ON runs (parent_run_id, parent_call) WHERE parent_run_id IS NOT NULL;
ALTER TABLE events ADD COLUMN subagent TEXT;
