-- Two things the Spanner front-end's GA DDL needs of the schema (issue 25).
--
-- Spanner's fine-grained access control (server/spanq_server/spanner/query/grants.py):
-- a database's roles (CREATE ROLE) and the privileges granted to each (GRANT /
-- REVOKE), which a session made with creator_role is held to. A role belongs
-- to a database made by CreateDatabase and goes with it.
CREATE TABLE spanq.spanner_roles (
    database  text NOT NULL REFERENCES spanq.spanner_databases (name) ON DELETE CASCADE,
    name      text NOT NULL,            -- folded, as every name (producer)
    spelled   text NOT NULL,            -- as CREATE ROLE wrote it, for GetDatabaseDdl
    -- object -> its privileges: {"queue:orders": ["insert"], "function:receive_orders":
    -- ["execute"], "table:users": ["select"]}, names folded, without the namespace
    grants    jsonb NOT NULL DEFAULT '{}',
    created   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (database, name)
);

-- A queue interleaved in a parent may refuse the parent row's deletion while
-- the row has messages (Spanner's INTERLEAVE IN PARENT ... ON DELETE NO
-- ACTION); every queue made before cascades, as they were made.
ALTER TABLE spanq.queues ADD COLUMN parent_cascade boolean NOT NULL DEFAULT true;
