-- 0021: the images runs gave their models (docs/PROTOCOL.md#images), each
-- once, by the sha256 of its bytes. A message.completed or tool.completed
-- brings an image's bytes with it and is stored without them; the image's
-- kind, size and dimensions are read from the bytes here, not taken from
-- the event. messages.images_json names a message's images (event.Image
-- without data, as JSON), so a resume, a fork or a session's later run
-- gives the model the same images again.
CREATE TABLE images (
	sha256     TEXT PRIMARY KEY,
	media_type TEXT NOT NULL,
	bytes      INTEGER NOT NULL,
	width      INTEGER NOT NULL,
	height     INTEGER NOT NULL,
	data       BLOB NOT NULL,
	created_at TEXT NOT NULL
);

ALTER TABLE messages ADD COLUMN images_json TEXT;
