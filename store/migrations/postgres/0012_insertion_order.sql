-- 0012 in PostgreSQL's dialect (see ../0012_insertion_order.sql): the
-- rowid SQLite has of itself, as an identity column, so that "ORDER BY
-- created_at, rowid" means the same on both. Rows inserted before it are
-- numbered in no particular order; a PostgreSQL store starts here empty.
ALTER TABLE runs ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
ALTER TABLE receipts ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
ALTER TABLE tool_calls ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
