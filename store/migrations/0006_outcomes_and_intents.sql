-- 0006: a run's end says its reason in one word (reason) and in a
-- sentence for people (detail). An intent keeps the arguments it was made
-- with, so `agent resume --resend-unknown` can send it again, and whether
-- its go-ahead may have reached the process that acts on it: one that
-- never did cannot have happened.

ALTER TABLE runs ADD COLUMN detail TEXT NOT NULL DEFAULT '';

ALTER TABLE receipts ADD COLUMN args_json TEXT;
-- 1 for rows written before this column: their go-ahead may have gone out.
ALTER TABLE receipts ADD COLUMN acked INTEGER NOT NULL DEFAULT 1 CHECK (acked IN (0, 1));
