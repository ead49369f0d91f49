-- Names as a Spanner DDL declared them. spanq's queue and column names are
-- lowercase identifiers (so psql users never quote them); Spanner's names are
-- case-insensitive for lookup but come back in result sets and
-- GetDatabaseDdl as declared (`Id`, `Payload`), and clients look columns up
-- by that spelling (Java's getLong("Id") is case-sensitive). The Spanner
-- front-end records the spelling of each queue it creates here; a queue
-- dropped by any path takes its row with it.
CREATE TABLE spanq.spanner_names (
    queue    text PRIMARY KEY REFERENCES spanq.queues (name) ON DELETE CASCADE,
    spelled  jsonb NOT NULL   -- {"queue": "MyQueue", "columns": {"id": "Id", "payload": "Payload"}}
);
