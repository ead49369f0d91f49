-- The Spanner front-end's own records (server/spanq_server/spanner/), kept in
-- PostgreSQL so that they survive a restart and every server sees the same.
--
-- Instances and databases are Spanner's names for where queues live; each is
-- stored as its admin API message (google.spanner.admin...Instance/Database).
CREATE TABLE spanq.spanner_instances (
    name      text PRIMARY KEY,       -- projects/P/instances/I
    instance  bytea NOT NULL
);

CREATE TABLE spanq.spanner_databases (
    name      text PRIMARY KEY,       -- projects/P/instances/I/databases/D
    instance  text NOT NULL REFERENCES spanq.spanner_instances (name) ON DELETE CASCADE,
    database  bytea NOT NULL
);

-- Names as a Spanner DDL declared them, and the database that created the
-- queue. spanq's queue and column names are lowercase identifiers (so psql
-- users never quote them); Spanner's names are case-insensitive for lookup but
-- come back in result sets and GetDatabaseDdl as declared (`Id`, `Payload`),
-- and clients look columns up by that spelling (Java's getLong("Id") is
-- case-sensitive). A queue dropped by any path takes its row with it.
CREATE TABLE spanq.spanner_names (
    queue     text PRIMARY KEY REFERENCES spanq.queues (name) ON DELETE CASCADE,
    database  text,                   -- the Spanner database whose DDL created it
    spelled   jsonb NOT NULL          -- {"queue": "MyQueue", "columns": {"id": "Id", "payload": "Payload"}}
);
CREATE INDEX spanner_names_database ON spanq.spanner_names (database);
