-- 0017: notifications and one-decision links (docs/PROTOCOL.md#notifications).
-- A notification is one run event told to one [[notify]] channel, sent
-- once through this outbox: queued (next_at: when it is tried), pending
-- (its intent: a process is sending it until claimed_until), done (its
-- receipt, notification_sent, in details), unknown (the sender stopped
-- before it knew: never sent again unless a person asks), failed (given up
-- after a day of retries) or skipped (the wait it was about was answered
-- first). key is the run, the event (its seq, or for a wait its wait id)
-- and the channel, hashed.
CREATE TABLE notifications (
  key           TEXT PRIMARY KEY,
  run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  event         TEXT NOT NULL,
  seq           INTEGER NOT NULL DEFAULT 0,
  wait_id       TEXT NOT NULL DEFAULT '',
  channel_json  TEXT NOT NULL,
  payload_json  TEXT NOT NULL,
  state         TEXT NOT NULL CHECK (state IN ('queued', 'pending', 'done', 'unknown', 'failed', 'skipped')),
  tries         INTEGER NOT NULL DEFAULT 0,
  next_at       TEXT,
  claimed_until TEXT,
  last_error    TEXT NOT NULL DEFAULT '',
  details_json  TEXT,
  created_at    TEXT NOT NULL,
  updated_at    TEXT NOT NULL
);
CREATE INDEX notifications_run ON notifications (run_id);
CREATE INDEX notifications_queued ON notifications (next_at) WHERE state = 'queued';
CREATE INDEX notifications_pending ON notifications (claimed_until) WHERE state = 'pending';

-- A one-decision link's token decides one wait, once, until the wait's
-- deadline. Only its SHA-256 is kept: the store never holds a usable link.
CREATE TABLE wait_links (
  token_hash TEXT PRIMARY KEY,
  run_id     TEXT NOT NULL,
  wait_id    TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  used_at    TEXT,
  created_at TEXT NOT NULL,
  FOREIGN KEY (run_id, wait_id) REFERENCES waits (run_id, wait_id) ON DELETE CASCADE
);
CREATE INDEX wait_links_wait ON wait_links (run_id, wait_id);
