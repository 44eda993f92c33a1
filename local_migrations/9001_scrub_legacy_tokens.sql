-- 9001: an opt-in layout step, applied only by `edge-runtime migrate --scrub-legacy-tokens`
-- (edge_runtime/local/legacy_token_scrub.py), never by opening the database. Numbers from 9000
-- up are opt-in steps; the automatic migrations keep counting from 0005 below them.
--
-- Its row in schema_migrations is the layout marker: no `run_cancellation_dispatches.lease_token`
-- holds a raw token any more, only 'sha256:<64 hex>' (ADR-0456 §10). A build that does not know
-- this id refuses the file, as it refuses any database written by a newer release. The scrub
-- records, in the same transaction, a `legacy_tokens.scrubbed` row of device_events: the backup's
-- name and a fingerprint of every table, the rollback gate of `migrate --rollback-scrub`.
--
-- legacy_lease_token_digest(value) is registered by the scrub on its own connection: the stored
-- form of a value, 'sha256:' || the lease-token digest of a raw token; a stored digest unchanged.
-- No schema object is added, so the schema stays what the automatic migrations produce.

UPDATE run_cancellation_dispatches
SET lease_token = legacy_lease_token_digest(lease_token)
WHERE lease_token IS NOT NULL AND lease_token <> legacy_lease_token_digest(lease_token);
