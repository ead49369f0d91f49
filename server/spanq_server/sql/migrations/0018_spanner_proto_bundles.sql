-- Spanner's proto bundles (server/spanq_server/spanner/query/protos.py): the
-- protocol buffer types a database's columns may take (CREATE / ALTER / DROP
-- PROTO BUNDLE), and the descriptors they came with (UpdateDatabaseDdl's
-- proto_descriptors, a serialized google.protobuf.FileDescriptorSet), which
-- GetDatabaseDdl gives back. One bundle per database, made by CreateDatabase's
-- database and gone with it. A queue whose Payload is one of its messages keeps
-- that type in its spelling (spanq.spanner_names) and its payload as bytea.
CREATE TABLE spanq.spanner_proto_bundles (
    database     text PRIMARY KEY REFERENCES spanq.spanner_databases (name) ON DELETE CASCADE,
    types        text[] NOT NULL,        -- full names, case-sensitive, in the order first bundled
    descriptors  bytea NOT NULL
);
