-- 0013: notifications, as the Local tables keep them (Local 0017; docs/notifications.md): channels,
-- the rules that pick them, and the outbox every worker delivers under a lease. Every limit is
-- declared in edge_runtime/contract/notifications.py.
-- No role of the profile may DELETE: a removed channel is marked (removed_at_ms) and its secret
-- parameters cleared at once; a schedule's rules (or the device default's, owner '') are one row,
-- replaced in place. The admin role reads nothing of them (secrets, and what the messages say).
CREATE TABLE ql3.notify_channels (
    id text PRIMARY KEY CHECK (char_length(id) BETWEEN 1 AND 36),
    name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 64),
    kind text NOT NULL CHECK (kind IN ('webhook', 'bark', 'telegram', 'wecom', 'dingtalk', 'feishu', 'serverchan',
                                       'pushplus', 'ntfy', 'gotify', 'email')),
    params jsonb NOT NULL CHECK (jsonb_typeof(params) = 'object'),
    secret_params jsonb NOT NULL CHECK (jsonb_typeof(secret_params) = 'object'),
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    removed_at_ms bigint CHECK (removed_at_ms >= 0),
    CHECK (removed_at_ms IS NULL OR secret_params = '{}'::jsonb)
);
CREATE UNIQUE INDEX notify_channels_live_name_key ON ql3.notify_channels (name) WHERE removed_at_ms IS NULL;

-- owner: a schedule's id, or '' for the device's default rules; rules: [{"channelId", "on"}].
CREATE TABLE ql3.notify_rules (
    owner text PRIMARY KEY CHECK (char_length(owner) <= 36),
    rules jsonb NOT NULL CHECK (jsonb_typeof(rules) = 'array'),
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= 0)
);

CREATE TABLE ql3.notify_outbox (
    id text PRIMARY KEY CHECK (char_length(id) BETWEEN 1 AND 36),
    idempotency_key text NOT NULL UNIQUE CHECK (char_length(idempotency_key) BETWEEN 1 AND 64),
    run_id text,
    channel_id text NOT NULL CHECK (char_length(channel_id) BETWEEN 1 AND 36),
    channel_name text NOT NULL CHECK (char_length(channel_name) BETWEEN 1 AND 64),
    outcome text CHECK (outcome IS NULL OR outcome IN ('succeeded', 'failed', 'timeout', 'lost', 'cancelled')),
    title text CHECK (title IS NULL OR char_length(title) <= 256),
    body text CHECK (body IS NULL OR octet_length(body) <= 16384),
    status text NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'given_up')),
    tries integer NOT NULL CHECK (tries >= 0),
    next_at_ms bigint NOT NULL CHECK (next_at_ms >= 0),
    lease_owner text CHECK (lease_owner IS NULL OR char_length(lease_owner) BETWEEN 1 AND 128),
    lease_expires_at_ms bigint CHECK (lease_expires_at_ms IS NULL OR lease_expires_at_ms >= 0),
    last_error text CHECK (last_error IS NULL OR char_length(last_error) <= 512),
    coalesce_key text CHECK (coalesce_key IS NULL OR char_length(coalesce_key) <= 256),
    coalesced integer NOT NULL DEFAULT 0 CHECK (coalesced >= 0),
    since_ms bigint CHECK (since_ms IS NULL OR since_ms >= 0),
    window_ends_at_ms bigint CHECK (window_ends_at_ms IS NULL OR window_ends_at_ms >= 0),
    sent_at_ms bigint CHECK (sent_at_ms IS NULL OR sent_at_ms >= 0),
    created_at_ms bigint NOT NULL CHECK (created_at_ms >= 0),
    CHECK ((status = 'sending') = (lease_owner IS NOT NULL AND lease_expires_at_ms IS NOT NULL)),
    CHECK ((status = 'sent') = (sent_at_ms IS NOT NULL))
);
-- The senders' scan: the due rows only.
CREATE INDEX notify_outbox_due ON ql3.notify_outbox (next_at_ms) WHERE status IN ('pending', 'sending');
CREATE INDEX notify_outbox_run ON ql3.notify_outbox (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX notify_outbox_coalesce ON ql3.notify_outbox (coalesce_key, created_at_ms) WHERE coalesce_key IS NOT NULL;

-- Coalescing reads the newest row of a rule and source, then inserts or counts: two workers ending
-- Runs of one schedule at once take this lock first, so they count into one summary.
INSERT INTO ql3.runtime_locks VALUES ('notify_coalesce');

GRANT SELECT, INSERT, UPDATE ON ql3.notify_channels, ql3.notify_rules, ql3.notify_outbox TO ql3_runtime;
