-- 0010 in PostgreSQL's dialect (see ../0010_compaction.sql).
-- Types are translated as 0001_init.sql here says.

ALTER TABLE messages ADD COLUMN replaced_by BIGINT;

-- position orders the conversation: a message's own seq, or for a
-- summary the seq of the first message it replaced.
ALTER TABLE messages ADD COLUMN position BIGINT;

-- summary marks a message that is a compaction's summary.
ALTER TABLE messages ADD COLUMN summary BIGINT NOT NULL DEFAULT 0;

-- resume_after (RFC 3339) is when a run a rate limit interrupted may go
-- on (DESIGN.md §12); the gateway resumes such runs by itself then.
ALTER TABLE runs ADD COLUMN resume_after TEXT;
