-- The commit ledger: one row per committed mutating request, written in the
-- same transaction as its effect, so a replay can answer without guessing.

CREATE TABLE spanq.commit_ledger (
    request_id  text PRIMARY KEY,
    fingerprint bytea NOT NULL,     -- sha256 of the request without its request_id
    response    bytea NOT NULL,     -- the serialized response message
    commit_time timestamptz NOT NULL DEFAULT now()
);

-- Pruning walks entries oldest first.
CREATE INDEX commit_ledger_commit_time ON spanq.commit_ledger (commit_time);
