-- 0010: context compaction (DESIGN.md §12). A context.compacted event
-- replaces a span of a run's conversation with a summary: the replaced
-- messages stay for people (runs show) but leave the conversation sent to
-- the model, and the summary takes the place of the first of them.

-- replaced_by is the seq of the context.compacted that replaced the
-- message; NULL while it is part of the conversation.
ALTER TABLE messages ADD COLUMN replaced_by INTEGER;

-- position orders the conversation: a message's own seq, or for a
-- summary the seq of the first message it replaced.
ALTER TABLE messages ADD COLUMN position INTEGER;

-- summary marks a message that is a compaction's summary.
ALTER TABLE messages ADD COLUMN summary INTEGER NOT NULL DEFAULT 0;

-- resume_after (RFC 3339) is when a run a rate limit interrupted may go
-- on (DESIGN.md §12); the gateway resumes such runs by itself then.
ALTER TABLE runs ADD COLUMN resume_after TEXT;
