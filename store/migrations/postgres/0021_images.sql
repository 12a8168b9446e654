-- 0021 in PostgreSQL's dialect (see ../0021_images.sql). An image's bytes
-- are BYTEA, SQLite's BLOB.
CREATE TABLE images (
	sha256     TEXT PRIMARY KEY,
	media_type TEXT NOT NULL,
	bytes      BIGINT NOT NULL,
	width      BIGINT NOT NULL,
	height     BIGINT NOT NULL,
	data       BYTEA NOT NULL,
	created_at TEXT NOT NULL
);

ALTER TABLE messages ADD COLUMN images_json TEXT;
