-- 0006 in PostgreSQL's dialect (see ../0006_outcomes_and_intents.sql).
-- Types are translated as 0001_init.sql here says.

ALTER TABLE runs ADD COLUMN detail TEXT NOT NULL DEFAULT '';

ALTER TABLE receipts ADD COLUMN args_json TEXT;
-- 1 for rows written before this column: their go-ahead may have gone out.
ALTER TABLE receipts ADD COLUMN acked BIGINT NOT NULL DEFAULT 1 CHECK (acked IN (0, 1));
