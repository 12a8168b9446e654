-- 0020: subagents (the task tool, docs/PROTOCOL.md#subagents). A sub-run is
-- a run of its own whose parent_run_id is the run whose task call it
-- answers; parent_call names that call (its id, after PHASE/ATTEMPT/ in a
-- harness phase), so that a resume of the parent continues the sub-run
-- rather than starting another; description is the task's. Its events are
-- also shown in the parent's stream: a copy in the parent's journal with
-- subagent set to the sub-run's id, which changes nothing of the parent's
-- state.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT REFERENCES runs (id) ON DELETE CASCADE;
ALTER TABLE runs ADD COLUMN parent_call TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN description TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_parent ON runs (parent_run_id, parent_call) WHERE parent_run_id IS NOT NULL;
ALTER TABLE events ADD COLUMN subagent TEXT;
