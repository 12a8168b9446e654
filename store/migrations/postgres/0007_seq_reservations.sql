-- 0007 in PostgreSQL's dialect (see ../0007_seq_reservations.sql).
-- Types are translated as 0001_init.sql here says.

ALTER TABLE runs ADD COLUMN seq_reserved BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN seq_reserved BIGINT NOT NULL DEFAULT 0;
