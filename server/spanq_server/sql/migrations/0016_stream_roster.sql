-- Every server's open Receive streams, for the dashboard's consumers list: each
-- server (a --workers child, a replica) keeps one row here, rewritten when its
-- streams open or close and on a heartbeat while it has any, and deletes it as
-- it stops. A row whose heartbeat is stale (a server that died) is left out of
-- reads and deleted by the next server that writes its own.
CREATE TABLE spanq.stream_roster (
    instance       text PRIMARY KEY,      -- a random id per server process
    server         text NOT NULL,         -- as an operator knows it: host, address, pid
    streams        jsonb NOT NULL,        -- [{queue, peer, opened_at, held, delivered, ...}]
    heartbeat_time timestamptz NOT NULL   -- the database's clock: servers' clocks may differ
);
