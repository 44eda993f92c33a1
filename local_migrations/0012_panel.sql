-- 0012: the web panel's password and sessions (docs/panel.md).
--
-- One password: a salted PBKDF2-HMAC-SHA256 hash with its iteration count (never the password).
-- Setting a new one deletes every session. A session is kept only as the SHA-256 digest of its
-- random cookie token, as a lease token is: the database never holds what a browser presents.
CREATE TABLE panel_password (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    algorithm TEXT NOT NULL CHECK (algorithm = 'pbkdf2-sha256'),
    iterations INTEGER NOT NULL CHECK (iterations >= 1),
    salt BLOB NOT NULL CHECK (length(salt) >= 16),
    hash BLOB NOT NULL CHECK (length(hash) = 32),
    set_at_ms INTEGER NOT NULL CHECK (set_at_ms >= 0)
) STRICT;

CREATE TABLE panel_sessions (
    token_digest TEXT PRIMARY KEY NOT NULL CHECK (length(token_digest) = 64),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    last_seen_at_ms INTEGER NOT NULL CHECK (last_seen_at_ms >= 0)
) STRICT, WITHOUT ROWID;
