-- The Spanner front-end's own records (server/spanq_server/spanner/), kept in
-- PostgreSQL so that they survive a restart and every server sees the same.
--
-- Instances and databases are Spanner's names for where queues live; each is
-- stored as its admin API message (google.spanner.admin...Instance/Database).
CREATE TABLE spanq.spanner_instances (
    name      text PRIMARY KEY,       -- projects/P/instances/I
    instance  bytea NOT NULL
);

-- Each database is its own namespace: its queue MyQueue is the PostgreSQL
-- table (and spanq.v1 queue) <namespace>myqueue, d1_myqueue for the first
-- database made. A database name no CreateDatabase made reaches the default
-- namespace, spanq.v1's, whose queues have no prefix.
CREATE SEQUENCE spanq.spanner_namespaces;

CREATE TABLE spanq.spanner_databases (
    name      text PRIMARY KEY,       -- projects/P/instances/I/databases/D
    instance  text NOT NULL REFERENCES spanq.spanner_instances (name) ON DELETE CASCADE,
    namespace text NOT NULL UNIQUE DEFAULT 'd' || nextval('spanq.spanner_namespaces') || '_',
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

-- Where a psql user finds a Spanner database's queues.
CREATE VIEW spanq.spanner_queues AS
SELECT n.database, n.spelled ->> 'queue' AS queue, n.queue AS "table"
FROM spanq.spanner_names AS n;
