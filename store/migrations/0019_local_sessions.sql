-- 0019: a session agent chat keeps without a gateway. Its runs are driven,
-- and resumed, by whichever process on this store holds their lease; a
-- gateway's session (local = 0) has its sequence kept by the gateways, so a
-- local resume of one of its runs is refused (supervisor.Reopen).
ALTER TABLE sessions ADD COLUMN local INTEGER NOT NULL DEFAULT 0;
