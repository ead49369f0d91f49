-- Tables and indexes made through the Spanner API (server/spanq_server/spanner/schema.py).
--
-- A Spanner database's table Users is the PostgreSQL table public.<namespace>users
-- (d1_users for the first database made), its columns folded to lower case; its
-- index UsersByName is the index public.d1_usersbyname. This registry holds what
-- PostgreSQL does not: the names as declared, the Spanner types, INTERLEAVE IN
-- PARENT, and which database made it. Only relations listed here are reachable
-- through the Spanner API (never another PostgreSQL table).
CREATE TABLE spanq.spanner_tables (
    name       text PRIMARY KEY,       -- the PostgreSQL relation (schema public)
    database   text,                   -- the Spanner database whose DDL made it (NULL: the default namespace)
    kind       text NOT NULL CHECK (kind IN ('table', 'index')),
    declared   text NOT NULL,          -- the name as the DDL declared it: Users
    created    bigserial,              -- creation order (GetDatabaseDdl lists them so)
    definition jsonb NOT NULL
);
CREATE INDEX spanner_tables_database ON spanq.spanner_tables (database);
