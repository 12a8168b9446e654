-- 0020 in PostgreSQL's dialect (see ../0020_reserved.sql): a stand-in.
SELECT 1;
