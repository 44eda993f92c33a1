-- 0003: a copy of each ended Attempt's log (its tail), stored by the worker that ran it, so
-- `edge-runtime-cluster logs` answers on any host (the log file stays on the worker's host).
-- Append-only by privilege like run_events: the runtime role may INSERT and SELECT, nothing else;
-- the first copy stands. The content limit is STORED_LOG_MAX_BYTES of edge_runtime/contract/runs.py
-- (a test holds the two equal).
CREATE TABLE ql3.attempt_logs (
    attempt_id text PRIMARY KEY REFERENCES ql3.run_attempts (id),
    content bytea NOT NULL CHECK (octet_length(content) <= 65536),
    -- The whole log's size on the worker's host: larger than the content when the start was cut.
    size_bytes bigint NOT NULL CHECK (size_bytes >= octet_length(content)),
    worker_id text NOT NULL CHECK (length(worker_id) BETWEEN 1 AND 128),
    stored_at_ms bigint NOT NULL CHECK (stored_at_ms >= 0)
);

REVOKE ALL ON ql3.attempt_logs FROM PUBLIC;
GRANT SELECT, INSERT ON ql3.attempt_logs TO ql3_runtime;
