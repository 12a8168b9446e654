-- 0014: the web view's signed-in pages (DESIGN.md §15), in the store so
-- that every gateway of a shared database (§14) accepts a page signed in
-- on another, a restart signs nobody out, and a sign-out on one gateway
-- ends the session on all. Only a SHA-256 of the cookie is kept: the
-- store never holds a usable cookie.
CREATE TABLE web_sessions (
  id_hash TEXT PRIMARY KEY,
  expires_at TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX web_sessions_expires ON web_sessions (expires_at);
