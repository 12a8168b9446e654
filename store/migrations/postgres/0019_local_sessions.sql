-- 0019 in PostgreSQL's dialect (see ../0019_local_sessions.sql).
ALTER TABLE sessions ADD COLUMN local BIGINT NOT NULL DEFAULT 0;
