-- 0007: streamed text (message.delta) is shown before it is written; the
-- seqs it may take are reserved here first, so that after a crash the next
-- event continues above every seq ever handed out, and none is reused.

ALTER TABLE runs ADD COLUMN seq_reserved INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN seq_reserved INTEGER NOT NULL DEFAULT 0;
