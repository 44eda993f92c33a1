-- 0017: notifications (docs/notifications.md): channels, the rules that pick them, the outbox.
--
-- A channel's secret parameters (tokens, keys, passwords) are kept here in clear, in the 0600
-- database, as a secret env entry's value is, and never shown: every output masks them
-- (edge_runtime/contract/redaction.py, store_redactor). Every limit below is declared in
-- edge_runtime/contract/notifications.py.
CREATE TABLE notify_channels (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
    kind TEXT NOT NULL CHECK (kind IN ('webhook', 'bark', 'telegram', 'wecom', 'dingtalk', 'feishu', 'serverchan',
                                       'pushplus', 'ntfy', 'gotify', 'email')),
    params TEXT NOT NULL CHECK (json_valid(params) AND json_type(params) = 'object'),
    secret_params TEXT NOT NULL CHECK (json_valid(secret_params) AND json_type(secret_params) = 'object'),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0)
) STRICT;

-- A rule: a schedule's (schedule_id), or the device's default (schedule_id NULL). A schedule with
-- rules of its own follows only those; every other Run follows the default ones.
CREATE TABLE notify_rules (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT REFERENCES schedules (id) ON DELETE CASCADE,
    channel_id TEXT NOT NULL REFERENCES notify_channels (id) ON DELETE CASCADE,
    on_outcomes TEXT NOT NULL CHECK (json_valid(on_outcomes) AND json_type(on_outcomes) = 'array'),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0)
) STRICT;
CREATE UNIQUE INDEX notify_rules_owner_channel ON notify_rules (coalesce(schedule_id, ''), channel_id);

-- The outbox: one row per message, written in the transaction that ends its Run (or by
-- `notify send`). A sender claims a due row (status 'sending', lease owner and expiry, tries + 1),
-- sends it outside any transaction, then records 'sent', 'pending' again with its next try, or
-- 'given_up' with the reason; a lease left by a killed sender is taken over once it expired.
-- idempotency_key never changes between tries: providers that take one drop a repeat.
-- channel_id has no foreign key: a message of a removed channel stays, given up with the reason.
CREATE TABLE notify_outbox (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 36),
    idempotency_key TEXT NOT NULL UNIQUE CHECK (length(idempotency_key) BETWEEN 1 AND 64),
    run_id TEXT REFERENCES runs (id) ON DELETE CASCADE,
    rule_id INTEGER,
    channel_id TEXT NOT NULL CHECK (length(channel_id) BETWEEN 1 AND 36),
    channel_name TEXT NOT NULL CHECK (length(channel_name) BETWEEN 1 AND 64),
    outcome TEXT CHECK (outcome IS NULL OR outcome IN ('succeeded', 'failed', 'timeout', 'lost', 'cancelled')),
    title TEXT CHECK (title IS NULL OR length(title) <= 256),
    body TEXT CHECK (body IS NULL OR length(CAST(body AS BLOB)) <= 16384),
    status TEXT NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'given_up')),
    tries INTEGER NOT NULL CHECK (tries >= 0),
    next_at_ms INTEGER NOT NULL CHECK (next_at_ms >= 0),
    lease_owner TEXT CHECK (lease_owner IS NULL OR length(lease_owner) BETWEEN 1 AND 128),
    lease_expires_at_ms INTEGER CHECK (lease_expires_at_ms IS NULL OR lease_expires_at_ms >= 0),
    last_error TEXT CHECK (last_error IS NULL OR length(last_error) <= 512),
    coalesce_key TEXT CHECK (coalesce_key IS NULL OR length(coalesce_key) <= 256),
    coalesced INTEGER NOT NULL DEFAULT 0 CHECK (coalesced >= 0),
    since_ms INTEGER CHECK (since_ms IS NULL OR since_ms >= 0),
    window_ends_at_ms INTEGER CHECK (window_ends_at_ms IS NULL OR window_ends_at_ms >= 0),
    sent_at_ms INTEGER CHECK (sent_at_ms IS NULL OR sent_at_ms >= 0),
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    CHECK ((status = 'sending') = (lease_owner IS NOT NULL AND lease_expires_at_ms IS NOT NULL)),
    CHECK ((status = 'sent') = (sent_at_ms IS NOT NULL))
) STRICT;
-- The sender's scan: the due rows only (an idle device reads an empty index).
CREATE INDEX notify_outbox_due ON notify_outbox (next_at_ms) WHERE status IN ('pending', 'sending');
CREATE INDEX notify_outbox_run ON notify_outbox (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX notify_outbox_coalesce ON notify_outbox (coalesce_key, created_at_ms) WHERE coalesce_key IS NOT NULL;
