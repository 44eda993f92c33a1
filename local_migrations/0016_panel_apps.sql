-- 0016: the panel's apps and their tokens: the credentials other programs reach the device's
-- OpenAPI with (docs/qinglong.md, edge_runtime/local/panel_apps.py).
--
-- An app keeps its client_id (not a secret: it names the app in a token request) and only the
-- SHA-256 digest of its client_secret, as a session keeps only its token's: a copy of the
-- database yields no credential. scopes is a JSON array of the contract's AppScope values.
-- A token is kept only as its digest too, with the app it opens and when it expires; removing
-- the app removes its tokens. Tokens are issued one per window of the app's lifetime (the same
-- token to every request of a window), so an app holds a bounded number of rows.
CREATE TABLE panel_apps (
    name TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    client_id TEXT NOT NULL UNIQUE CHECK (length(client_id) = 12),
    secret_digest TEXT NOT NULL CHECK (length(secret_digest) = 64),
    scopes TEXT NOT NULL CHECK (json_valid(scopes) AND json_type(scopes) = 'array'),
    token_ttl_ms INTEGER NOT NULL CHECK (token_ttl_ms BETWEEN 60000 AND 31536000000),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0)
) STRICT;

CREATE TABLE panel_app_tokens (
    token_digest TEXT PRIMARY KEY NOT NULL CHECK (length(token_digest) = 64),
    app_name TEXT NOT NULL REFERENCES panel_apps (name) ON DELETE CASCADE,
    expires_at_ms INTEGER NOT NULL CHECK (expires_at_ms >= 0),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0)
) STRICT, WITHOUT ROWID;

CREATE INDEX panel_app_tokens_app ON panel_app_tokens (app_name);
