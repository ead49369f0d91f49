-- Every statement spanq runs, by name. A block starts with `-- name --`,
-- then `-- ` lines that describe it, then the SQL. `%(name)s` are bound
-- parameters; `{name}` are identifiers or fragments composed with
-- psycopg.sql (never user text). Loaded once by spanq_server.sql.

-- advisory_lock --
-- Serialises schema migrations and queue DDL across servers sharing a database.
SELECT pg_advisory_xact_lock(%(lock_id)s)

-- migration_table_create --
-- The bookkeeping table for versioned migrations.
CREATE SCHEMA IF NOT EXISTS spanq;
CREATE TABLE IF NOT EXISTS spanq.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- migration_applied_list --
-- Versions already applied.
SELECT version FROM spanq.schema_migrations ORDER BY version

-- migration_record --
-- Records one applied migration (same transaction as the migration itself).
INSERT INTO spanq.schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- queue_count --
-- How many queues exist, for the queues-per-database limit.
SELECT count(*) FROM spanq.queues

-- queue_get --
-- One queue's catalog row.
SELECT name, key_columns, payload_type, key_generated, parent_table, lease_duration,
       initial_backoff, max_backoff, max_delivery_attempts, dead_letter_queue, create_time,
       disable_send, disable_delivery, message_retention, archive_duration, parent_cascade,
       max_in_flight_per_key, concurrency_key, rate_limit, rate_limit_burst, enable_message_ordering
FROM spanq.queues
WHERE name = %(name)s

-- queue_list --
-- A page of queues in name order, after the page token's name.
SELECT name, key_columns, payload_type, key_generated, parent_table, lease_duration,
       initial_backoff, max_backoff, max_delivery_attempts, dead_letter_queue, create_time,
       disable_send, disable_delivery, message_retention, archive_duration, parent_cascade,
       max_in_flight_per_key, concurrency_key, rate_limit, rate_limit_burst, enable_message_ordering
FROM spanq.queues
WHERE name > %(after)s
ORDER BY name
LIMIT %(limit)s

-- queue_insert --
-- Adds a queue to the catalog; its table and functions are created in the same transaction.
INSERT INTO spanq.queues (name, key_columns, payload_type, key_generated, parent_table,
                          lease_duration, initial_backoff, max_backoff,
                          max_delivery_attempts, dead_letter_queue, disable_send, disable_delivery,
                          message_retention, archive_duration, parent_cascade, max_in_flight_per_key,
                          concurrency_key, rate_limit, rate_limit_burst, enable_message_ordering)
VALUES (%(name)s, %(key_columns)s, %(payload_type)s, %(key_generated)s, %(parent_table)s,
        %(lease_duration)s, %(initial_backoff)s, %(max_backoff)s,
        %(max_delivery_attempts)s, %(dead_letter_queue)s, %(disable_send)s, %(disable_delivery)s,
        %(message_retention)s, %(archive_duration)s, %(parent_cascade)s, %(max_in_flight_per_key)s,
        %(concurrency_key)s, %(rate_limit)s, %(rate_limit_burst)s, %(enable_message_ordering)s)
RETURNING create_time

-- queue_update --
-- Changes a live queue's settings (UpdateQueue), under the catalog lock; its
-- functions are re-created in the same transaction. No row: the queue was
-- dropped, or dropped and created again, since it was read. A resumed
-- delivery wakes the queue's streams on every server at commit.
UPDATE spanq.queues SET lease_duration = %(lease_duration)s, initial_backoff = %(initial_backoff)s,
       max_backoff = %(max_backoff)s, max_delivery_attempts = %(max_delivery_attempts)s,
       dead_letter_queue = %(dead_letter_queue)s, disable_send = %(disable_send)s,
       disable_delivery = %(disable_delivery)s, message_retention = %(message_retention)s,
       archive_duration = %(archive_duration)s, max_in_flight_per_key = %(max_in_flight_per_key)s,
       concurrency_key = %(concurrency_key)s, rate_limit = %(rate_limit)s,
       rate_limit_burst = %(rate_limit_burst)s, enable_message_ordering = %(enable_message_ordering)s
WHERE name = %(name)s AND create_time = %(create_time)s
RETURNING create_time, CASE WHEN NOT disable_delivery THEN pg_notify('spanq_wakeup', name) END

-- queue_delete --
-- Removes a queue from the catalog; RESTRICT on dead_letter_queue refuses a queue still in use.
DELETE FROM spanq.queues WHERE name = %(name)s

-- relation_exists --
-- Whether a table (or any relation), or a type, of that name exists in the
-- public schema: a table's row type would clash with the type.
SELECT to_regclass(format('public.%%I', %(name)s::text)) IS NOT NULL
    OR to_regtype(format('public.%%I', %(name)s::text)) IS NOT NULL

-- relations_taken --
-- Which of the names (of indexes a new queue needs) a relation of the public
-- schema has taken already.
SELECT r.name
FROM unnest(%(names)s::text[]) AS r(name)
WHERE to_regclass(format('public.%%I', r.name)) IS NOT NULL

-- queue_dependents --
-- The queues that name this one as their parent table or dead-letter queue:
-- while one exists, this queue cannot be dropped.
SELECT name, parent_table = %(name)s AS is_child
FROM spanq.queues
WHERE parent_table = %(name)s OR dead_letter_queue = %(name)s
ORDER BY name

-- ddl_lock_timeout --
-- Bounds each lock wait of queue DDL (the rest of its transaction): a table
-- held by another open transaction fails the DDL instead of stalling it, and
-- everyone queued behind it, for as long as that transaction stays open.
SELECT set_config('lock_timeout', %(lock_timeout)s, true)

-- table_lock --
-- Takes a lock queue DDL needs on one table (the queue's own to drop it, a
-- parent's to reference it), before the catalog lock: so no DDL waits on a
-- table while it holds the catalog lock every other queue DDL needs.
LOCK TABLE {table} IN {mode} MODE

-- parent_key_width --
-- The number of primary-key columns of a would-be parent table; no row when it has no primary key.
SELECT i.indnkeyatts
FROM pg_index AS i
WHERE i.indrelid = to_regclass(format('public.%%I', %(name)s::text)) AND i.indisprimary

-- queue_table_create --
-- A queue is a table. deliver_time is when the message is next deliverable:
-- leasing moves it past the lease's end (plus backoff), so one index serves
-- new, scheduled and expired-lease messages alike. The spanq_ columns are
-- spanq's own metadata. The lease token is COLLATE "C" so that a stream's
-- tokens (which share a prefix) form one range of the token index, which
-- holds only the tokens that do not carry their key (lease_token_index,
-- created beside this).
CREATE TABLE {queue} (
    {key_column_definitions},
    payload                          {payload_type} NOT NULL,
    deliver_time                     timestamptz NOT NULL DEFAULT now(),
    spanq_lease_token                text COLLATE "C",
    spanq_lease_expiration_timestamp timestamptz,
    spanq_delivery_attempt           integer NOT NULL DEFAULT 0,
    spanq_enqueue_time               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY ({key_columns}){parent_constraint}
);
CREATE INDEX {deliver_time_index} ON {queue} (deliver_time);
CREATE TRIGGER {notify_trigger} AFTER INSERT ON {queue}
    FOR EACH STATEMENT EXECUTE FUNCTION spanq.notify_send()

-- queue_key_column --
-- A key column of a queue's table (queue_table_create's {key_column_definitions}).
{column} {type} NOT NULL

-- queue_key_column_generated --
-- A generated key column (Spanner's `k INT64 AS (expr) STORED`): PostgreSQL
-- computes it on every insert, spanq's or psql's, and refuses a value for it.
-- The expression is the Spanner front-end's translation of the declared one,
-- deterministic functions of the row's other key columns only (IMMUTABLE, as
-- PostgreSQL requires; spanq.farm_fingerprint is).
{column} {type} GENERATED ALWAYS AS ({expression}) STORED NOT NULL

-- lease_token_index --
-- A queue's token index: only of the tokens that do not carry their message's
-- key (lease_token_unkeyed; lease_token_new makes those only for keys too
-- long for a token, and tokens granted before migration 0010). A token that
-- carries its key finds its row by primary key (lease_token_keys), so a lease
-- writes no entry here: every lease moves deliver_time, so no lease is a HOT
-- update and each writes an entry into every index whose predicate it meets.
CREATE UNIQUE INDEX {lease_token_index} ON {queue} (spanq_lease_token)
    WHERE spanq_lease_token IS NOT NULL AND {unkeyed}

-- lease_token_unkeyed --
-- Whether a (non-NULL) token lacks its key: a token that carries it has '~'
-- just before its 32 random hex digits, any other a '.' (lease_token_new).
-- The same expression as the partial index's predicate (migration 0010 writes
-- it out too), so that the planner matches it to the index.
substr({token}, length({token}) - 32, 1) <> '~'

-- lease_token_new --
-- A fresh lease token, `<prefix>.<lease end, epoch microseconds>.<key>~<32
-- random hex>`: the prefix first (a stream's tokens share it), the lease end
-- (renewlease answers for a token after its row is gone), the message's key
-- (lease_token_key_*, columns joined by ','), so that the token finds its row
-- by primary key, and the random part, which only the row holds: a token is
-- good while it equals the row's, so one cannot be made up for another key.
-- A key that has no token form (NULL) or would make the token longer than
-- 200 characters (what the server takes: 145 = 200 less the lease end's 20,
-- the random part's 32 and 3 separators) gets `<prefix>.<lease end>.<32
-- random hex>`, which the token index finds (lease_token_index).
CASE WHEN length({prefix}) + length({key_field}) <= 145
     THEN {prefix} || '.' || {end} || '.' || {key_field} || '~' || replace(gen_random_uuid()::text, '-', '')
     ELSE {prefix} || '.' || {end} || '.' || replace(gen_random_uuid()::text, '-', '') END

-- lease_token_prefix --
-- The prefix of a token (the prefix may hold '.'; what follows it has a
-- fixed form). A token that carries its key: less its last two '.' fields,
-- the lease end and `<key>~<random>` (string functions, as in
-- lease_token_key_field); any other: less the lease end (none before
-- migration 0004) and the random part.
CASE WHEN {keyed}
     THEN left({token}, length({token}) - length(split_part(reverse({token}), '.', 1))
                                        - length(split_part(reverse({token}), '.', 2)) - 2)
     ELSE regexp_replace({token}, '(\.-?[0-9]{{1,19}})?\.[0-9a-f]{{32}}$', '') END

-- lease_token_key_field --
-- The key field of a token that carries its key: between the last '.' and
-- the '~' before the random part (string functions: a regular expression
-- took ~20 us a token, as long as the statement's other work per message).
reverse(split_part(reverse(left({token}, length({token}) - 33)), '.', 1))

-- lease_token_key_bool --
-- A key value as a token carries it. No form yields '.', '~' or ','.
CASE WHEN {value} THEN 't' ELSE 'f' END

-- lease_token_key_int --
{value}::text

-- lease_token_key_string --
-- '*' escapes itself and the three separators (never '%': these fragments go
-- into statements with parameters too).
replace(replace(replace(replace({value}, '*', '*2A'), '.', '*2E'), '~', '*7E'), ',', '*2C')

-- lease_token_key_bytes --
encode({value}, 'hex')

-- lease_token_key_timestamp --
-- Epoch microseconds, for years 1 to 9999 (Spanner's range); other values
-- (SQL can write 'infinity' or a year BC) have no token form.
CASE WHEN isfinite({value}) AND extract(epoch FROM {value}) >= -62135596800
          AND extract(epoch FROM {value}) < 253402300800
     THEN (extract(epoch FROM {value}) * 1000000)::bigint::text END

-- lease_token_part_bool --
-- A key value from a token's key field, or NULL when it is not one the
-- lease_token_key_* of its type makes: never an error, whatever the client
-- sent (a token that decodes to some key is still good only if it is the
-- row's own).
CASE {part} WHEN 't' THEN true WHEN 'f' THEN false END

-- lease_token_part_int --
CASE WHEN {part} ~ '^-?[0-9]{{1,19}}$'
          AND {part}::numeric BETWEEN -9223372036854775808 AND 9223372036854775807
     THEN {part}::bigint END

-- lease_token_part_string --
replace(replace(replace(replace({part}, '*2C', ','), '*7E', '~'), '*2E', '.'), '*2A', '*')

-- lease_token_part_bytes --
CASE WHEN {part} ~ '^([0-9a-f]{{2}})*$' THEN decode({part}, 'hex') END

-- lease_token_part_timestamp --
-- Whole days, then microseconds, on a timestamp without time zone: exact
-- (no float) and free of the session's time zone.
CASE WHEN {part} ~ '^-?[0-9]{{1,19}}$' AND {part}::numeric >= -62135596800000000
          AND {part}::numeric < 253402300800000000
     THEN (timestamp '1970-01-01' + div({part}::bigint, 86400000000) * interval '1 day'
           + mod({part}::bigint, 86400000000) * interval '1 microsecond') AT TIME ZONE 'UTC' END

-- lease_token_keys --
-- The key each lease token of a text array names, with the token (a subquery
-- to join the queue with by key AND token): decoded from the token when it
-- carries its key, else looked up in the token index (a token that matches
-- neither names nothing). A row is the token's only while its own token is
-- that very one: the join's `m.spanq_lease_token = f.spanq_token`.
SELECT {decoded_key_columns}, t.spanq_token
FROM unnest({tokens}) AS t(spanq_token)
WHERE NOT {token_unkeyed}
UNION ALL
SELECT {o_key_columns}, o.spanq_lease_token
FROM {queue} AS o
WHERE o.spanq_lease_token = ANY ({tokens}) AND {unkeyed}

-- queue_archive_create --
-- A queue's archive: acked messages, kept for its archive_duration when it has
-- one (message_ack_archive), with when and by which request they were acked.
-- A key may be in it more than once (sent and acked again). Indexed by ack
-- time, for pruning (archive_prune) and browsing (archive_peek).
CREATE TABLE IF NOT EXISTS {archive} (
    {key_column_definitions},
    payload                {payload_type} NOT NULL,
    spanq_enqueue_time     timestamptz NOT NULL,
    spanq_delivery_attempt integer NOT NULL,
    spanq_ack_time         timestamptz NOT NULL,
    spanq_ack_request_id   text,
    spanq_headers          jsonb,
    spanq_priority         smallint NOT NULL DEFAULT 0,
    spanq_ordering_key     text
);
-- Archives made before migration 0013 get the ordering key's column.
ALTER TABLE {archive} ADD COLUMN IF NOT EXISTS spanq_ordering_key text;
CREATE INDEX IF NOT EXISTS {archive_index} ON {archive} (spanq_ack_time)

-- queue_history_columns_add --
-- A message's dead-letter history, beside the columns of queue_table_create
-- (added to existing queues by migration 0008): set in a dead-letter queue,
-- by the move (queue_receive_dead_letter_steps), to the queue it came from,
-- its delivery attempts there, when it moved, and its last failure there
-- ('lease expired', a nack's reason, 'nacked', 'undeliverable: ...'). In a
-- queue, spanq_last_failure holds the reason of the last nack that gave one.
-- Then (migration 0012) the message's headers (NULL: none; spanq.headers_ok
-- holds an INSERT from psql to the limits) and priority (0 to 9), and the
-- priority index: only of messages above priority 0 (a queue that never uses
-- priorities writes no entry to it), one range per priority in deliver_time
-- order, which the receive function reads one priority at a time.
-- Then (migration 0013) the message's ordering key (NULL: none), its place
-- among its key's messages and, while a message waits behind an earlier one
-- of its key, the deliver_time it was sent with (queue_ordering_create).
ALTER TABLE {queue}
    ADD COLUMN IF NOT EXISTS spanq_last_failure         text,
    ADD COLUMN IF NOT EXISTS spanq_dead_letter_source   text,
    ADD COLUMN IF NOT EXISTS spanq_dead_letter_attempts integer,
    ADD COLUMN IF NOT EXISTS spanq_dead_letter_time     timestamptz,
    ADD COLUMN IF NOT EXISTS spanq_headers              jsonb,
    ADD COLUMN IF NOT EXISTS spanq_priority             smallint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS spanq_ordering_key         text COLLATE "C",
    ADD COLUMN IF NOT EXISTS spanq_ordering_seq         bigint,
    ADD COLUMN IF NOT EXISTS spanq_held_deliver_time    timestamptz;
-- NOT VALID: the rows there are (0) are not read again, under the table's
-- lock, to check them (8 s for 1M rows). The headers' limits are a trigger
-- on the writes that set them, not a CHECK: a CHECK runs on every write of a
-- row, each lease's too (a third of a lease's database time with headers).
DO $checks$
BEGIN
    ALTER TABLE {queue} ADD CONSTRAINT spanq_priority_range CHECK (spanq_priority BETWEEN 0 AND 9) NOT VALID;
EXCEPTION WHEN duplicate_object THEN NULL;  -- added before
END
$checks$;
CREATE OR REPLACE TRIGGER spanq_headers_limits BEFORE INSERT OR UPDATE OF spanq_headers ON {queue}
    FOR EACH ROW WHEN (NEW.spanq_headers IS NOT NULL) EXECUTE FUNCTION spanq.headers_check();
CREATE INDEX IF NOT EXISTS {priority_index} ON {queue} (spanq_priority, deliver_time) WHERE spanq_priority > 0

-- queue_ordering_create --
-- A queue with enable_message_ordering (CreateQueue, or UpdateQueue under
-- the table's lock, queue_ordering_drop undoes it); a queue without it has
-- none of this, so its sends and acks pay nothing for ordering keys.
-- Ordering keys (docs/semantics.md, Ordering keys): of a key's messages only
-- the first (its head, the lowest spanq_ordering_seq) is deliverable; each
-- later one is held, its deliver_time 'infinity' (past the end of every
-- index range the receive function reads, so leasing is unchanged and stays
-- O(log n)) and the deliver_time it was sent with in spanq_held_deliver_time.
-- When a head leaves the queue (an ack's DELETE from any surface, psql's
-- too, the move to the dead-letter queue, retention expiry, purge, a parent's
-- cascade), the statement trigger promotes the key's next message. A lease
-- that lapses or a nack leaves the head in place: the key waits for it.
--
-- One key's sends, and the statements that remove its messages, take turns
-- on the key's row of spanq.ordering_keys (locked to commit; a row lock, not
-- an advisory lock, so a batch of many keys never fills the shared lock
-- table): a send sees every committed message of its key, so its place
-- (one more than the key's last) is commit order, and a removal sees every
-- committed send. Keys are locked in key order (the column's collation is
-- "C": bytewise, the same everywhere) by the server's
-- sends (message_insert) and by removals, so two such statements cannot
-- deadlock; an application's own statements that lock keys in another order
-- may (PostgreSQL then fails one). The row holds nothing else: a removal that
-- leaves its key no message deletes it.
CREATE INDEX IF NOT EXISTS {ordering_index} ON {queue} (spanq_ordering_key, spanq_ordering_seq)
    WHERE spanq_ordering_key IS NOT NULL;
CREATE OR REPLACE FUNCTION spanq.{send_function}() RETURNS trigger
LANGUAGE plpgsql AS $send$
DECLARE
    last_seq bigint;
BEGIN
    IF NEW.spanq_ordering_key = '' OR octet_length(NEW.spanq_ordering_key) > 1024 THEN
        RAISE EXCEPTION 'an ordering key is 1 to 1024 bytes (NULL: none), not % bytes',
                        octet_length(NEW.spanq_ordering_key)
            USING ERRCODE = 'check_violation', TABLE = TG_TABLE_NAME, COLUMN = 'spanq_ordering_key';
    END IF;
    INSERT INTO spanq.ordering_keys AS k (queue, ordering_key) VALUES ({queue_name}, NEW.spanq_ordering_key)
    ON CONFLICT (queue, ordering_key) DO UPDATE SET queue = k.queue WHERE false;  -- locks it, writes nothing
    SELECT m.spanq_ordering_seq INTO last_seq FROM {queue} AS m
    WHERE m.spanq_ordering_key = NEW.spanq_ordering_key
    ORDER BY m.spanq_ordering_key DESC, m.spanq_ordering_seq DESC
    LIMIT 1;
    NEW.spanq_ordering_seq := coalesce(last_seq, 0) + 1;
    IF last_seq IS NULL THEN
        NEW.spanq_held_deliver_time := NULL;
    ELSE
        NEW.spanq_held_deliver_time := NEW.deliver_time;
        NEW.deliver_time := 'infinity';
    END IF;
    RETURN NEW;
END
$send$;
CREATE OR REPLACE FUNCTION spanq.{gone_function}() RETURNS trigger
LANGUAGE plpgsql AS $gone$
DECLARE
    promoted bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM spanq_gone AS g WHERE g.spanq_ordering_key IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO spanq.ordering_keys AS k (queue, ordering_key)
    SELECT DISTINCT {queue_name}, g.spanq_ordering_key FROM spanq_gone AS g
    WHERE g.spanq_ordering_key IS NOT NULL
    ORDER BY 2
    ON CONFLICT (queue, ordering_key) DO UPDATE SET queue = k.queue WHERE false;
    -- Each key's first message left, if held, becomes its head: deliverable
    -- from the time it was sent for (already past, most often).
    WITH promoted AS (
        UPDATE {queue} AS m SET deliver_time = m.spanq_held_deliver_time, spanq_held_deliver_time = NULL
        FROM (SELECT DISTINCT g.spanq_ordering_key FROM spanq_gone AS g
              WHERE g.spanq_ordering_key IS NOT NULL) AS d,
             LATERAL (SELECT {n_key_columns}, n.spanq_held_deliver_time FROM {queue} AS n
                      WHERE n.spanq_ordering_key = d.spanq_ordering_key
                      ORDER BY n.spanq_ordering_key, n.spanq_ordering_seq
                      LIMIT 1) AS n
        WHERE ({m_key_columns}) = ({n_key_columns}) AND n.spanq_held_deliver_time IS NOT NULL
        RETURNING 1
    )
    SELECT count(*) INTO promoted FROM promoted;
    IF promoted > 0 THEN
        PERFORM pg_notify('spanq_wakeup', {queue_name});  -- deliverable without an INSERT
    END IF;
    DELETE FROM spanq.ordering_keys AS k
    USING (SELECT DISTINCT g.spanq_ordering_key FROM spanq_gone AS g WHERE g.spanq_ordering_key IS NOT NULL) AS d
    WHERE k.queue = {queue_name} AND k.ordering_key = d.spanq_ordering_key
      AND NOT EXISTS (SELECT FROM {queue} AS n WHERE n.spanq_ordering_key = d.spanq_ordering_key);
    RETURN NULL;
END
$gone$;
-- A message's key and place are its send's: an UPDATE may not move them.
CREATE OR REPLACE FUNCTION spanq.{fixed_function}() RETURNS trigger
LANGUAGE plpgsql AS $fixed$
BEGIN
    RAISE EXCEPTION 'a message''s ordering key and its place among its key''s messages are set when it is sent'
        USING ERRCODE = 'check_violation', TABLE = TG_TABLE_NAME, COLUMN = 'spanq_ordering_key',
              HINT = 'delete the message and send it again with the key wanted';
END
$fixed$;
CREATE OR REPLACE TRIGGER spanq_ordering_send BEFORE INSERT ON {queue}
    FOR EACH ROW WHEN (NEW.spanq_ordering_key IS NOT NULL) EXECUTE FUNCTION spanq.{send_function}();
CREATE OR REPLACE TRIGGER spanq_ordering_gone AFTER DELETE ON {queue}
    REFERENCING OLD TABLE AS spanq_gone FOR EACH STATEMENT EXECUTE FUNCTION spanq.{gone_function}();
CREATE OR REPLACE TRIGGER spanq_ordering_fixed BEFORE UPDATE OF spanq_ordering_key, spanq_ordering_seq ON {queue}
    FOR EACH ROW WHEN (OLD.spanq_ordering_key IS DISTINCT FROM NEW.spanq_ordering_key
                       OR OLD.spanq_ordering_seq IS DISTINCT FROM NEW.spanq_ordering_seq)
    EXECUTE FUNCTION spanq.{fixed_function}();
DROP TRIGGER IF EXISTS spanq_ordering_off ON {queue}

-- queue_ordering_drop --
-- A queue without enable_message_ordering (CreateQueue's default, what
-- migration 0013 gives existing queues, an UpdateQueue that turns it off
-- once no message is held): no ordering triggers, functions, index or key
-- rows; one row trigger refuses a message with a key (spanq.ordering_off,
-- its WHEN evaluated only on INSERT and on an UPDATE that sets the key, not
-- on leases), so a key is never stored where nothing would order it.
DROP TRIGGER IF EXISTS spanq_ordering_send ON {queue};
DROP TRIGGER IF EXISTS spanq_ordering_gone ON {queue};
DROP TRIGGER IF EXISTS spanq_ordering_fixed ON {queue};
DROP FUNCTION IF EXISTS spanq.{send_function}();
DROP FUNCTION IF EXISTS spanq.{gone_function}();
DROP FUNCTION IF EXISTS spanq.{fixed_function}();
DROP INDEX IF EXISTS public.{ordering_index};
DELETE FROM spanq.ordering_keys WHERE queue = {queue_name};
CREATE OR REPLACE TRIGGER spanq_ordering_off BEFORE INSERT OR UPDATE OF spanq_ordering_key ON {queue}
    FOR EACH ROW WHEN (NEW.spanq_ordering_key IS NOT NULL) EXECUTE FUNCTION spanq.ordering_off()

-- queue_held_exists --
-- Whether a queue holds a message behind an earlier one of its ordering key
-- (deliver_time 'infinity': the deliver_time index finds it at once).
SELECT EXISTS (SELECT FROM {queue} WHERE deliver_time = 'infinity')

-- queue_parent_constraint --
-- The analogue of INTERLEAVE IN PARENT ... ON DELETE CASCADE (or NO ACTION):
-- the queue's leading key columns reference the parent's primary key.
,
    FOREIGN KEY ({parent_key_columns}) REFERENCES {parent_table} ON DELETE {on_delete}

-- queue_receive_function_create --
-- spanq.receive_<queue>(max_batch_size): leases up to max_batch_size
-- deliverable messages in one statement and returns them. The server uses
-- this same function, with a lease prefix naming its stream. SKIP LOCKED lets
-- concurrent receivers take disjoint rows instead of queueing on each other.
-- The new deliver_time is the lease's end plus the backoff for this attempt,
-- so a lease that lapses is redelivered after backoff with no sweeper.
-- Higher priorities first: one probe of the priority index per priority
-- from 9 down to 1 (each an index range of due messages in deliver_time
-- order), then priority 0 along the deliver_time index; the LIMIT stops the
-- probes once the batch is full. Each probe is LATERAL to `clock`, so that
-- `deliver_time <= now` bounds its index range (joined to the CTE instead, it
-- was a filter on a scan that ran on past the due messages when they were
-- fewer than the batch). A probe's range, (p, -infinity) to (p, now), and
-- its order, (priority, deliver_time), are the priority index's alone (row
-- comparisons, and no equality that would make the priority a constant of
-- the order): given `priority = p AND deliver_time <= now`, the planner
-- priced the deliver_time index, filtering by priority, the same or less
-- (stale statistics), and took it, reading ten times the rows at ten
-- priorities. So a lease stays O(log n) in the queue's
-- depth (ten descents) however the priorities are spread; one ORDER BY
-- (priority DESC, deliver_time) over one index would walk past every leased
-- or scheduled message of a higher priority.
-- A lease token (lease_token_new) carries the stream's prefix, the lease's
-- end and the message's key, so that renewals, acks and counts find its row
-- by primary key.
-- A message held behind an earlier one of its ordering key has deliver_time
-- 'infinity' (queue_ordering_create): no probe reaches it.
-- The columns these functions add beside the key columns (spanq_attempt,
-- spanq_old_token) are spanq_-prefixed, as no key column can be: a key column
-- named `attempt` made a reference ambiguous (migration 0006).
-- CREATE OR REPLACE: a migration re-creates existing queues' functions with it,
-- and UpdateQueue with the new settings; while delivery is paused
-- (disable_delivery) {delivery_paused} is `AND false`: it leases nothing.
-- A limited queue's function has {key_admits} (queue_receive_key_admits) and
-- {limit_steps} (queue_receive_limit_steps), and leases what the steps
-- admitted ({admitted} is `admitted AS ready`); an unlimited queue's has
-- neither, and leases `ready`.
CREATE OR REPLACE FUNCTION spanq.{receive_function}(
    max_batch_size integer DEFAULT 1,
    lease_duration interval DEFAULT {lease_duration},
    lease_prefix   text DEFAULT 'sql',
    now            timestamptz DEFAULT NULL)
RETURNS TABLE (
    {key_column_outputs},
    payload                          {payload_type},
    deliver_time                     timestamptz,
    spanq_lease_token                text,
    spanq_lease_expiration_timestamp timestamptz,
    spanq_delivery_attempt           integer,
    spanq_enqueue_time               timestamptz,
    spanq_last_batch_message         boolean,
    spanq_headers                    jsonb,
    spanq_priority                   smallint,
    spanq_ordering_key               text)
LANGUAGE sql VOLATILE
-- A SQL function's statements are planned without its arguments: the planner
-- guesses `ready` at a tenth of the due rows and joins it to the queue by
-- hashing the whole table, a scan per batch that grows with the queue's depth.
-- The join is by primary key to at most max_batch_size rows: index lookups
-- (and no JIT, which the guess's cost would bring in at 1M rows for 20 ms).
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $receive$
WITH clock AS (
    SELECT coalesce($4, statement_timestamp()) AS now
), ready AS (
    (SELECT r.*
     FROM clock, generate_series(9, 1, -1) AS p(priority),
          LATERAL (SELECT {ready_key_columns}, m.deliver_time, m.spanq_delivery_attempt + 1 AS spanq_attempt
                   FROM {queue} AS m
                   WHERE m.spanq_priority > 0
                     AND (m.spanq_priority, m.deliver_time) >= (p.priority, '-infinity')
                     AND (m.spanq_priority, m.deliver_time) <= (p.priority, clock.now){delivery_paused}{key_admits}
                   ORDER BY m.spanq_priority, m.deliver_time
                   LIMIT greatest($1, 1)
                   FOR UPDATE OF m SKIP LOCKED) AS r)
    UNION ALL
    SELECT low.*
    FROM clock,
         LATERAL (SELECT {ready_key_columns}, m.deliver_time, m.spanq_delivery_attempt + 1
                  FROM {queue} AS m
                  WHERE m.deliver_time <= clock.now AND m.spanq_priority = 0{delivery_paused}{key_admits}
                  ORDER BY m.deliver_time
                  LIMIT greatest($1, 1)
                  FOR UPDATE OF m SKIP LOCKED) AS low
    LIMIT greatest($1, 1)
){dead_letter_steps}{limit_steps}, leased AS (
    UPDATE {queue} AS m SET
        spanq_lease_token = {new_token},
        spanq_lease_expiration_timestamp = clock.now + $2,
        deliver_time = clock.now + $2
            + least({max_backoff}, {initial_backoff} * power(2, least(ready.spanq_attempt - 1, 40))),
        spanq_delivery_attempt = ready.spanq_attempt
    FROM {admitted}, clock
    WHERE ({m_key_columns}) = ({ready_qualified_key_columns}){live_condition}
    RETURNING {m_key_columns}, m.payload, ready.deliver_time, m.spanq_lease_token,
              m.spanq_lease_expiration_timestamp, m.spanq_delivery_attempt, m.spanq_enqueue_time,
              m.spanq_headers, m.spanq_priority, m.spanq_ordering_key
)
SELECT {leased_key_columns}, leased.payload, leased.deliver_time, leased.spanq_lease_token,
       leased.spanq_lease_expiration_timestamp, leased.spanq_delivery_attempt, leased.spanq_enqueue_time,
       row_number() OVER (ORDER BY leased.spanq_priority DESC, leased.deliver_time) = count(*) OVER (),
       leased.spanq_headers, leased.spanq_priority, leased.spanq_ordering_key
FROM leased
ORDER BY leased.spanq_priority DESC, leased.deliver_time
$receive$

-- queue_receive_dead_letter_steps --
-- Spliced into the receive function when the queue has a dead-letter queue:
-- a message past max_delivery_attempts moves there instead of being leased,
-- with its history (queue_history_columns_add): this queue, its attempts,
-- the move's time and its last failure. That attempt failed by its lease
-- running out when the row still holds its token (a nack clears it), else by
-- a nack, whose reason (message_note_failure) the row holds. A key the
-- dead-letter queue holds already is not moved: the message stays here, not
-- delivered again, and tries the move again after max_backoff (a key sent
-- there between the check and the insert fails the statement: nothing is
-- lost, the next receive parks it). Each move is counted in
-- spanq.dead_letter_counts (the metric spanq_queue_messages_dead_lettered).
-- A message moves with its ordering key (in order among its key's other dead
-- letters there) when the dead-letter queue has enable_message_ordering (else
-- without it), and its key's next message here becomes deliverable.
, dead AS (
    DELETE FROM {queue} AS m USING ready
    WHERE ({m_key_columns}) = ({ready_qualified_key_columns}) AND ready.spanq_attempt > {max_delivery_attempts}
      AND NOT EXISTS (SELECT FROM {dead_letter_queue} AS d WHERE ({d_key_columns}) = ({m_key_columns}))
    RETURNING {m_sent_key_columns}, m.payload, m.spanq_enqueue_time, m.spanq_headers, m.spanq_priority,
              CASE WHEN {dead_letter_ordered} THEN m.spanq_ordering_key END, m.spanq_delivery_attempt,
              CASE WHEN m.spanq_lease_token IS NOT NULL THEN 'lease expired'
                   ELSE coalesce(m.spanq_last_failure, 'nacked') END
), buried AS (
    INSERT INTO {dead_letter_queue} ({sent_key_columns}, payload, spanq_enqueue_time, spanq_headers, spanq_priority,
                                     spanq_ordering_key, spanq_dead_letter_attempts, spanq_last_failure, spanq_dead_letter_source,
                                     spanq_dead_letter_time)
    SELECT dead.*, {queue_name}, clock.now FROM dead, clock
), parked AS (
    UPDATE {queue} AS m SET deliver_time = clock.now + {max_backoff}
    FROM ready, clock
    WHERE ({m_key_columns}) = ({ready_qualified_key_columns}) AND ready.spanq_attempt > {max_delivery_attempts}
      AND EXISTS (SELECT FROM {dead_letter_queue} AS d WHERE ({d_key_columns}) = ({m_key_columns}))
), counted AS (
    INSERT INTO spanq.dead_letter_counts AS c (queue, total)
    SELECT {queue_name}, count(*) FROM dead HAVING count(*) > 0
    ON CONFLICT (queue) DO UPDATE SET total = c.total + excluded.total
)

-- queue_receive_key_admits --
-- Spliced into both scans of a receive function whose queue has
-- max_in_flight_per_key: a due message is passed over while its key value has
-- no lease left to give (queue_key_slots_function_create), so the scan goes
-- on to other keys' messages rather than stop at a batch of one busy key's.
AND spanq.{key_slots_function}(m.{concurrency_key}, clock.now) > 0

-- queue_receive_limit_steps --
-- Spliced into a limited queue's receive function after `ready` (and the
-- dead-letter steps): which of the rows `ready` locked are leased. {key_rank}
-- and {key_admitted}: per key value, no more of this batch than the key has
-- leases left (a batch may hold several messages of one key). {rate_gate},
-- {rate_cap} and {rate_spend}: no more than the queue's token bucket holds
-- (queue_receive_rate_gate). What is not admitted stays as it was: locked
-- until the statement commits, then due again.
{rate_gate}, ranked AS (
    SELECT ready.*, m.spanq_priority AS spanq_rank_priority{key_rank}
    FROM ready, {queue} AS m, clock
    WHERE ({m_key_columns}) = ({ready_qualified_key_columns}){live_condition}
), admitted AS (
    SELECT {ranked_key_columns}, ranked.deliver_time, ranked.spanq_attempt
    FROM ranked{key_admitted}
    ORDER BY ranked.spanq_rank_priority DESC, ranked.deliver_time{rate_cap}
){rate_spend}

-- queue_receive_key_rank --
-- Each ready message's place among its key's in the batch, and the leases
-- its key has left (queue_key_slots_function_create, which locks the key).
row_number() OVER (PARTITION BY ready.{concurrency_key}
                   ORDER BY m.spanq_priority DESC, ready.deliver_time) AS spanq_key_rank,
       spanq.{key_slots_function}(ready.{concurrency_key}, clock.now) AS spanq_slots

-- queue_receive_key_admitted --
WHERE ranked.spanq_key_rank <= ranked.spanq_slots

-- queue_receive_rate_gate --
-- The queue's token bucket, locked for the statement (FOR UPDATE reads its
-- latest committed tokens, whatever the statement's snapshot): so the leases
-- of all servers and psql sessions take turns on it, and together never take
-- more than the bucket holds. Refilled by the time since it was last taken
-- (never backwards: a statement that started earlier but waited for the lock
-- adds nothing), up to the burst. No bucket row: no tokens.
gate AS (
    SELECT least(b.tokens + {rate_limit} * greatest(extract(epoch FROM clock.now - b.refill_time), 0),
                 {rate_limit_burst}) AS available
    FROM spanq.rate_buckets AS b, clock
    WHERE b.queue = {queue_name}
    FOR UPDATE OF b
)

-- queue_receive_rate_cap --
LIMIT coalesce((SELECT floor(gate.available)::bigint FROM gate), 0)

-- queue_receive_rate_spend --
-- Takes a token per message admitted, and counts the messages admitted by
-- the key limit (if any) that the tokens left out.
spent AS (
    UPDATE spanq.rate_buckets AS b SET
        tokens = gate.available - (SELECT count(*) FROM admitted),
        refill_time = greatest(b.refill_time, clock.now),
        held_back = b.held_back + (SELECT count(*) FROM ranked{key_admitted}) - (SELECT count(*) FROM admitted)
    FROM gate, clock
    WHERE b.queue = {queue_name}
)

-- queue_key_slots_function_create --
-- spanq.keyslots_<queue>(value, now): how many more leases the value of the
-- queue's concurrency_key may get now (max_in_flight_per_key minus its
-- unexpired leases), or 0 while another transaction holds the value's lock.
-- First it takes that lock, a transaction-level advisory lock on the queue
-- and the value (try: a value another receiver is leasing is skipped, as SKIP
-- LOCKED skips its rows), held until the lease commits; then it counts, in a
-- statement of its own: a VOLATILE function's statement takes a fresh
-- snapshot, which sees every lease committed before the lock was granted. So
-- two receivers never both count a value's leases before either committed.
-- The count is an index range (the queue's spanq_kc_ index on the column and
-- the lease expiry). The parameters are spanq_-prefixed, as no key column can
-- be. The key's token form (lease_token_key_*) is the lock's value: the same
-- in every session, whatever its time zone. The value is `anyelement`, so that
-- one signature serves any column (CREATE OR REPLACE, never DROP, while the
-- queue lives: a receive that began under the definition before an
-- UpdateQueue still finds the function its body names).
CREATE OR REPLACE FUNCTION spanq.{key_slots_function}(spanq_value anyelement, spanq_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $slots$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext({queue_name}), coalesce(hashtext({value_form}), 0)) THEN
        RETURN 0;
    END IF;
    RETURN {max_in_flight_per_key} - (SELECT count(*) FROM {queue} AS m
                                      WHERE m.{concurrency_key} = spanq_value
                                        AND m.spanq_lease_expiration_timestamp > spanq_now);
END
$slots$

-- queue_key_slots_index --
-- What keyslots_<queue> counts by: a queue's leases per concurrency_key value.
CREATE INDEX IF NOT EXISTS {key_concurrency_index} ON {queue} ({concurrency_key}, spanq_lease_expiration_timestamp)

-- queue_key_slots_index_drop --
-- A queue's key limit removed, or counting by another column (UpdateQueue):
-- its index (the function stays until the queue is dropped, unused).
DROP INDEX IF EXISTS {key_concurrency_index}

-- rate_bucket_put --
-- A rate-limited queue's token bucket (CreateQueue, UpdateQueue): a new one
-- starts full; a kept one keeps its tokens, at most the new burst.
INSERT INTO spanq.rate_buckets AS b (queue, tokens, refill_time)
VALUES (%(queue)s, %(burst)s, statement_timestamp())
ON CONFLICT (queue) DO UPDATE SET tokens = least(b.tokens, excluded.tokens)

-- rate_bucket_delete --
DELETE FROM spanq.rate_buckets WHERE queue = %(queue)s

-- queue_renew_function_create --
-- spanq.renewlease_<queue>(lease_tokens): Spanner's RENEWLEASE. A held,
-- unexpired lease gets a new token and a new expiry. A token finds its row by
-- the key it carries, or through the token index (lease_token_keys), and
-- holds the lease only while it is the row's own. The new token keeps the old
-- one's prefix (lease_token_prefix). A token with no live lease whose own lease end
-- (carried in the token, see queue_receive_function_create) is still ahead
-- returns a row with a NULL new token: its message was acknowledged, or the
-- token was superseded by a renewal or released. Unparseable and expired
-- tokens return no row. A lease_duration of 0 releases the lease (a nack): no
-- new token, redelivery after backoff. Rows are locked in token order so
-- concurrent renewers cannot deadlock. The join to the tokens' keys is by
-- primary key (no hash or merge join: see the receive function).
CREATE OR REPLACE FUNCTION spanq.{renew_function}(
    lease_tokens   text[],
    lease_duration interval DEFAULT {lease_duration},
    now            timestamptz DEFAULT NULL)
RETURNS TABLE (
    spanq_old_lease_token            text,
    spanq_new_lease_token            text,
    spanq_lease_expiration_timestamp timestamptz)
LANGUAGE sql VOLATILE
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $renew$
WITH clock AS (
    SELECT coalesce($3, statement_timestamp()) AS now
), held AS (
    SELECT {ready_key_columns}, m.spanq_lease_token AS spanq_old_token, m.spanq_delivery_attempt AS spanq_attempt
    FROM {queue} AS m, ({token_keys}) AS f, clock
    WHERE ({m_key_columns}) = ({f_key_columns}) AND m.spanq_lease_token = f.spanq_token
      AND m.spanq_lease_expiration_timestamp > clock.now
    ORDER BY m.spanq_lease_token
    FOR UPDATE OF m
), renewed AS (
    UPDATE {queue} AS m SET
        spanq_lease_token = CASE WHEN $2 > interval '0' THEN {new_token} END,
        spanq_lease_expiration_timestamp = clock.now + greatest($2, interval '0'),
        deliver_time = clock.now + greatest($2, interval '0')
            + least({max_backoff}, {initial_backoff} * power(2, least(held.spanq_attempt - 1, 40)))
    FROM held, clock
    WHERE ({m_key_columns}) = ({held_key_columns})
    RETURNING held.spanq_old_token, m.spanq_lease_token,
              CASE WHEN $2 > interval '0' THEN m.spanq_lease_expiration_timestamp END
)
SELECT * FROM renewed
UNION ALL
-- Unrenewable until its lease end: nothing is stored for it, the token says it.
SELECT DISTINCT t.token, NULL::text, NULL::timestamptz
FROM unnest($1) AS t(token), clock
WHERE substring(t.token FROM '\.(-?[0-9]{{1,19}})\.(?:[^.~]*~)?[0-9a-f]{{32}}$')::numeric
        > extract(epoch FROM clock.now) * 1000000
  AND t.token NOT IN (SELECT renewed.spanq_old_token FROM renewed)
$renew$

-- function_grantees --
-- A queue function's own grants of EXECUTE, to give back when it is
-- re-created: NULL while it has the default (PUBLIC may execute), else the
-- roles granted it other than its owner ('' for PUBLIC).
SELECT CASE WHEN p.proacl IS NOT NULL THEN
           array(SELECT coalesce(r.rolname, '') FROM aclexplode(p.proacl) AS a
                 LEFT JOIN pg_roles AS r ON r.oid = a.grantee
                 WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner) END
FROM pg_proc AS p
WHERE p.oid = to_regproc(%(function)s)

-- function_drop --
DROP FUNCTION spanq.{function}

-- function_revoke --
REVOKE EXECUTE ON FUNCTION spanq.{function} FROM PUBLIC

-- function_grant --
GRANT EXECUTE ON FUNCTION spanq.{function} TO {grantee}

-- queue_drop --
-- Drops a queue's functions and table (its messages with it), and its archive,
-- and the rows its ordering keys had (queue_ordering_create).
DROP FUNCTION IF EXISTS spanq.{receive_function};
DROP FUNCTION IF EXISTS spanq.{renew_function};
DROP FUNCTION IF EXISTS spanq.{key_slots_function};
DROP TABLE IF EXISTS {queue};
DROP FUNCTION IF EXISTS spanq.{send_function};
DROP FUNCTION IF EXISTS spanq.{gone_function};
DROP FUNCTION IF EXISTS spanq.{fixed_function};
DELETE FROM spanq.ordering_keys WHERE queue = {queue_name};
DROP TABLE IF EXISTS {archive}

-- message_insert --
-- Stores a batch of messages: one row per element of the parallel arrays
-- (the arrays go in binary format: psycopg dumps them 4-5x faster so).
-- A deliver_time in the past means now, as in Spanner. Messages without a
-- deliver_time are a microsecond apart in the order sent (now, now + 1 us, ...):
-- receive takes them by deliver_time, so one Send's messages are delivered in
-- the order sent; with a shared deliver_time their order would be the plan's.
-- Rows go in ordering-key order, then in the order sent (the key's order):
-- each keyed row's trigger locks its key (queue_ordering_create), so keys
-- are locked in the order removals lock them.
INSERT INTO {queue} ({key_columns}, payload, deliver_time, spanq_enqueue_time, spanq_headers, spanq_priority,
                     spanq_ordering_key)
SELECT {s_key_columns}, s.spanq_payload,
       greatest(coalesce(s.spanq_deliver_time, clock.now + coalesce(s.spanq_delay, interval '0')
                                               + (s.spanq_ordinal - 1) * interval '1 microsecond'), clock.now),
       clock.now, s.spanq_headers, coalesce(s.spanq_priority, 0), s.spanq_ordering_key
FROM unnest({key_arrays}, %(payloads)b::{payload_type}[], %(deliver_times)b::timestamptz[],
            %(delays)b::interval[], %(headers)b::jsonb[], %(priorities)b::smallint[],
            %(ordering_keys)b::text[]) WITH ORDINALITY
         AS s({key_columns}, spanq_payload, spanq_deliver_time, spanq_delay, spanq_headers, spanq_priority,
              spanq_ordering_key, spanq_ordinal),
     (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
ORDER BY s.spanq_ordering_key COLLATE "C", s.spanq_ordinal

-- message_insert_keys --
-- message_insert of a queue with generated key columns: the messages' whole
-- keys, as PostgreSQL computed them, for the send's answer (in no particular
-- order: the caller matches them to the messages by the columns they gave).
{insert}
RETURNING {key_columns}

-- message_insert_claimed --
-- A commit group's sends to one queue, in one statement: claims each
-- request_id in the commit ledger with its response (a send's response, its
-- keys, is known before it runs), then stores the messages of the requests
-- this transaction now owns (a microsecond apart, as in message_insert: the
-- group's sends in order, each one's messages in order). Returns the request_ids it claimed; one not
-- returned was committed before (a replay) and stores nothing. Claims go in
-- request_id order so that two groups claiming the same ids cannot deadlock.
-- A claim of an id another transaction holds waits for it, as ledger_claim.
WITH claimed AS (
    INSERT INTO spanq.commit_ledger (request_id, fingerprint, response, commit_time)
    SELECT r.request_id, r.fingerprint, r.response, clock.now
    FROM unnest(%(request_ids)b::text[], %(fingerprints)b::bytea[], %(responses)b::bytea[])
             AS r(request_id, fingerprint, response),
         (SELECT coalesce(%(now)s::timestamptz, now()) AS now) AS clock
    ORDER BY r.request_id
    ON CONFLICT (request_id) DO NOTHING
    RETURNING request_id
), stored AS (
    INSERT INTO {queue} ({key_columns}, payload, deliver_time, spanq_enqueue_time, spanq_headers, spanq_priority,
                         spanq_ordering_key)
    SELECT {s_key_columns}, s.spanq_payload,
           greatest(coalesce(s.spanq_deliver_time, clock.now + coalesce(s.spanq_delay, interval '0')
                                                   + (s.spanq_ordinal - 1) * interval '1 microsecond'), clock.now),
           clock.now, s.spanq_headers, coalesce(s.spanq_priority, 0), s.spanq_ordering_key
    FROM unnest({key_arrays}, %(payloads)b::{payload_type}[], %(deliver_times)b::timestamptz[],
                %(delays)b::interval[], %(owners)b::text[], %(headers)b::jsonb[],
                %(priorities)b::smallint[], %(ordering_keys)b::text[]) WITH ORDINALITY
             AS s({key_columns}, spanq_payload, spanq_deliver_time, spanq_delay, spanq_owner, spanq_headers,
                  spanq_priority, spanq_ordering_key, spanq_ordinal),
         (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
    WHERE s.spanq_owner IN (SELECT request_id FROM claimed)
    ORDER BY s.spanq_ordering_key COLLATE "C", s.spanq_ordinal  -- as message_insert
)
SELECT request_id FROM claimed

-- message_lease_batch --
-- Leases up to max_batch_size deliverable messages for one stream, while the
-- queue is still the one the stream opened: a queue dropped and created again
-- under its name (on any server) has another create_time, and the statement
-- fails before the function leases anything (an uncorrelated condition is a
-- one-time filter, checked before the function scan runs). No catalog row
-- (dropped meanwhile): nothing leased.
SELECT * FROM spanq.{receive_function}(%(max_batch_size)s, %(lease_duration)s, %(lease_prefix)s, %(now)s)
WHERE (SELECT CASE WHEN %(create_time)s::timestamptz IS NULL OR q.create_time = %(create_time)s THEN true
                   ELSE ('spanq: queue ' || q.name || ' was dropped and created again')::boolean END
       FROM spanq.queues AS q WHERE q.name = %(queue_name)s)

-- message_lease_history --
-- The dead-letter history of messages just leased from a dead-letter queue,
-- by lease token (lease_token_keys), for ReceivedMessage.dead_letter.
SELECT m.spanq_lease_token, m.spanq_dead_letter_source, m.spanq_dead_letter_attempts,
       m.spanq_dead_letter_time, m.spanq_last_failure
FROM {queue} AS m, ({token_keys}) AS f
WHERE ({m_key_columns}) = ({f_key_columns}) AND m.spanq_lease_token = f.spanq_token
  AND m.spanq_dead_letter_source IS NOT NULL

-- message_select --
-- A plain SELECT over a queue (Spanner's front-end): keys, payload and
-- deliver_time of the matching messages, without leasing them. The
-- conditions compare key columns or deliver_time with bound parameters. A
-- message held behind an earlier one of its ordering key shows the
-- deliver_time it was sent with, as Peek shows it (its own is 'infinity',
-- which no client reads).
SELECT {key_columns}, m.payload, coalesce(m.spanq_held_deliver_time, m.deliver_time)
FROM {queue} AS m
WHERE {conditions}
ORDER BY {order}
LIMIT %(limit)s

-- held_begin --
-- Starts a transaction held open across calls (Spanner's read-write
-- transactions): a lock wait longer than lock_timeout fails the statement
-- (the caller aborts the transaction) instead of queueing behind another
-- open transaction until it is reaped.
SELECT set_config('lock_timeout', %(lock_timeout)s, true)

-- message_ack --
-- Deletes acked messages by key; with a lease token, only while that token is
-- current. {archive} (in each ack statement): nothing, or for a queue with an
-- archive_duration the step that keeps what `acked` deleted (message_ack_archive).
WITH acked AS (
    DELETE FROM {queue} AS m
    USING unnest({key_arrays}, %(lease_tokens)s::text[]) AS a({key_columns}, spanq_lease_token)
    WHERE ({m_key_columns}) = ({a_key_columns})
      AND (a.spanq_lease_token IS NULL OR m.spanq_lease_token = a.spanq_lease_token)
    RETURNING {m_key_columns}{archive_returning}
){archive}
SELECT {acked_key_columns} FROM acked

-- message_ack_archive_returning --
-- What an ack's DELETE returns beside the keys when the queue keeps an archive.
, m.payload AS spanq_payload, m.spanq_enqueue_time, m.spanq_delivery_attempt, m.spanq_headers, m.spanq_priority,
  m.spanq_ordering_key

-- message_ack_archive --
-- An ack statement's step for a queue with an archive_duration: what its
-- `acked` step deleted goes to the archive in the same statement, with the
-- ack's time and request_id (one statement still: see docs/semantics.md,
-- Archive, for what it costs).
, archived AS (
    INSERT INTO {archive} ({key_columns}, payload, spanq_enqueue_time, spanq_delivery_attempt, spanq_ack_time,
                           spanq_ack_request_id, spanq_headers, spanq_priority, spanq_ordering_key)
    SELECT {acked_key_columns}, acked.spanq_payload, acked.spanq_enqueue_time, acked.spanq_delivery_attempt,
           coalesce(%(now)s::timestamptz, statement_timestamp()), {request_id}, acked.spanq_headers,
           acked.spanq_priority, acked.spanq_ordering_key
    FROM acked
)

-- message_ack_claimed --
-- An Ack RPC's ledger claim and its DELETE in one statement (one round trip
-- instead of two): ledger_claim, recording the response of every message
-- acked, then message_ack only if the claim was made. `claimed` is false when
-- another transaction committed the request_id (it waited for that one, as
-- ledger_claim does). One row per deleted key; one row of NULL keys when none.
WITH claim AS (
    INSERT INTO spanq.commit_ledger (request_id, fingerprint, response, commit_time)
    VALUES (%(request_id)s, %(fingerprint)s, %(response)s, coalesce(%(now)s::timestamptz, now()))
    ON CONFLICT (request_id) DO NOTHING
    RETURNING true
), acked AS (
    DELETE FROM {queue} AS m
    USING unnest({key_arrays}, %(lease_tokens)s::text[]) AS a({key_columns}, spanq_lease_token)
    WHERE EXISTS (SELECT FROM claim)
      AND ({m_key_columns}) = ({a_key_columns})
      AND (a.spanq_lease_token IS NULL OR m.spanq_lease_token = a.spanq_lease_token)
    RETURNING {m_key_columns}{archive_returning}
){archive}
SELECT EXISTS (SELECT FROM claim) AS claimed, {acked_key_columns}
FROM (SELECT) AS one LEFT JOIN acked ON true

-- message_ack_claimed_group --
-- A commit group's Ack requests to one queue in one statement, which commits
-- by itself (see group_commit.py). A request whose every message is there
-- under the lease token it gives (`ready`) is claimed in the commit ledger
-- with its response (every message acked) and its messages are deleted,
-- unless its request_id was committed before (ledger_claim's rules: nothing
-- deleted). Any other request is neither claimed nor applied: the caller
-- runs it alone, which finds its exact outcome (OUT_OF_RANGE,
-- FAILED_PRECONDITION, a partial ack under ignore_not_found). An Ack request
-- is all-or-nothing, and this statement only ever commits the "all" case.
-- `held` locks the acked rows in key order (two groups cannot deadlock on
-- them) under the DELETE's own conditions on the same snapshot: a row
-- another transaction changed since is re-checked in its latest version by
-- both, so the DELETE takes exactly the rows `held` found. Should a claimed
-- request delete fewer rows than it acks all the same, the last SELECT fails
-- the statement, and nothing commits (ASSERT_ROWS_MODIFIED, checked by the
-- database). One row per request: request_id, ready, claimed.
WITH acks AS (
    SELECT * FROM unnest({key_arrays}, %(lease_tokens)s::text[], %(owners)s::text[])
                      AS a({key_columns}, spanq_lease_token, spanq_owner)
), held AS (
    SELECT a.spanq_owner
    FROM {queue} AS m JOIN acks AS a ON ({m_key_columns}) = ({a_key_columns})
    WHERE a.spanq_lease_token IS NULL OR m.spanq_lease_token = a.spanq_lease_token
    ORDER BY {m_key_columns}
    FOR UPDATE OF m
), requests AS (
    SELECT r.request_id, r.fingerprint, r.response, r.acks, coalesce(h.n, 0) = r.acks AS ready
    FROM unnest(%(request_ids)s::text[], %(fingerprints)s::bytea[], %(responses)s::bytea[],
                %(counts)s::bigint[]) AS r(request_id, fingerprint, response, acks)
    LEFT JOIN (SELECT spanq_owner, count(*) AS n FROM held GROUP BY spanq_owner) AS h
           ON h.spanq_owner = r.request_id
), claimed AS (
    INSERT INTO spanq.commit_ledger (request_id, fingerprint, response, commit_time)
    SELECT r.request_id, r.fingerprint, r.response, clock.now
    FROM requests AS r, (SELECT coalesce(%(now)s::timestamptz, now()) AS now) AS clock
    WHERE r.ready
    ORDER BY r.request_id
    ON CONFLICT (request_id) DO NOTHING
    RETURNING request_id
), acked AS (
    DELETE FROM {queue} AS m
    USING acks AS a
    WHERE a.spanq_owner IN (SELECT request_id FROM claimed)
      AND ({m_key_columns}) = ({a_key_columns})
      AND (a.spanq_lease_token IS NULL OR m.spanq_lease_token = a.spanq_lease_token)
    RETURNING a.spanq_owner{archive_keys}{archive_returning}
){archive}
SELECT r.request_id, r.ready,
       CASE WHEN c.request_id IS NULL THEN false WHEN coalesce(d.n, 0) = r.acks THEN true
            ELSE ('spanq: an ack group deleted fewer rows than request ' || r.request_id || ' acks')::boolean END
FROM requests AS r
LEFT JOIN claimed AS c ON c.request_id = r.request_id
LEFT JOIN (SELECT spanq_owner, count(*) AS n FROM acked GROUP BY spanq_owner) AS d ON d.spanq_owner = r.request_id

-- message_ack_probe --
-- For acks that deleted nothing: which of those messages still exist (their lease moved on).
SELECT {m_key_columns}
FROM {queue} AS m
JOIN unnest({key_arrays}) AS a({key_columns}) ON ({m_key_columns}) = ({a_key_columns})

-- lease_renew --
-- Renews or releases leases by token.
SELECT * FROM spanq.{renew_function}(%(lease_tokens)s, %(lease_duration)s, %(now)s)

-- lease_return --
-- Undoes leases that never reached a receiver (its stream ended while they
-- were being taken): each message gets back the deliver_time and attempt
-- count it had, as if it had never been leased. Other servers learn of it by
-- the notification in the same statement.
WITH returned AS (
    UPDATE {queue} AS m SET
        spanq_lease_token = NULL,
        spanq_lease_expiration_timestamp = NULL,
        deliver_time = r.deliver_time,
        spanq_delivery_attempt = m.spanq_delivery_attempt - 1
    FROM unnest(%(lease_tokens)s::text[], %(deliver_times)s::timestamptz[]) AS r(lease_token, deliver_time),
         ({token_keys}) AS f
    WHERE f.spanq_token = r.lease_token
      AND ({m_key_columns}) = ({f_key_columns}) AND m.spanq_lease_token = f.spanq_token
    RETURNING 1
)
SELECT count(*), pg_notify('spanq_wakeup', %(queue_name)s::text) FROM returned HAVING count(*) > 0

-- lease_attempt_refund --
-- Gives back the delivery attempt of leases their stream's client did not read
-- (receive.py): the lease itself stays (token, expiry and deliver_time as they
-- are, so its holder can still ack it), and the next delivery counts the same
-- attempt again. A token that moved on (acked, renewed, released, leased again)
-- matches nothing. Returns how many attempts were given back.
WITH refunded AS (
    UPDATE {queue} AS m SET spanq_delivery_attempt = m.spanq_delivery_attempt - 1
    FROM ({token_keys}) AS f
    WHERE ({m_key_columns}) = ({f_key_columns}) AND m.spanq_lease_token = f.spanq_token
      AND m.spanq_delivery_attempt > 0
    RETURNING 1
)
SELECT count(*) FROM refunded

-- message_dead_letter --
-- Moves leased messages that no client can receive (a value written by SQL
-- that the receive path cannot encode) to the queue's dead-letter queue, by
-- lease token (lease_token_keys), as stored: the database copies what spanq could not read,
-- with its history as in the receive function (the failure: `reason`). A
-- key the dead-letter queue holds already stays here, as in the receive
-- function (its lease released, tried again after max_backoff). Returns how
-- many left the queue.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), dead AS (
    DELETE FROM {queue} AS m USING ({token_keys}) AS f
    WHERE ({m_key_columns}) = ({f_key_columns}) AND m.spanq_lease_token = f.spanq_token
      AND NOT EXISTS (SELECT FROM {dead_letter_queue} AS d WHERE ({d_key_columns}) = ({m_key_columns}))
    RETURNING {m_sent_key_columns}, m.payload, m.spanq_enqueue_time, m.spanq_headers, m.spanq_priority,
              m.spanq_ordering_key, m.spanq_delivery_attempt
), buried AS (
    INSERT INTO {dead_letter_queue} ({sent_key_columns}, payload, spanq_enqueue_time, spanq_headers, spanq_priority,
                                     spanq_ordering_key, spanq_dead_letter_attempts, spanq_last_failure, spanq_dead_letter_source,
                                     spanq_dead_letter_time)
    SELECT dead.*, %(reason)s, %(queue_name)s, clock.now FROM dead, clock
), parked AS (
    UPDATE {queue} AS m SET spanq_lease_token = NULL, spanq_lease_expiration_timestamp = clock.now,
                            deliver_time = clock.now + %(max_backoff)s, spanq_last_failure = %(reason)s
    FROM clock, ({token_keys}) AS f
    WHERE ({m_key_columns}) = ({f_key_columns}) AND m.spanq_lease_token = f.spanq_token
      AND EXISTS (SELECT FROM {dead_letter_queue} AS d WHERE ({d_key_columns}) = ({m_key_columns}))
), counted AS (
    INSERT INTO spanq.dead_letter_counts AS c (queue, total)
    SELECT %(queue_name)s, count(*) FROM dead HAVING count(*) > 0
    ON CONFLICT (queue) DO UPDATE SET total = c.total + excluded.total
)
SELECT count(*) FROM dead

-- message_note_failure --
-- Before a nack (RenewLease with lease_duration 0, in its transaction): the
-- reason it gave (NULL: none), on the rows its live leases hold, for the
-- dead-letter history (queue_receive_dead_letter_steps). Rows are locked in
-- token order, as the renew function locks them.
UPDATE {queue} AS m SET spanq_last_failure = %(reason)s
FROM (SELECT {n_key_columns}, n.spanq_lease_token FROM {queue} AS n, ({token_keys}) AS f
      WHERE ({n_key_columns}) = ({f_key_columns}) AND n.spanq_lease_token = f.spanq_token
        AND n.spanq_lease_expiration_timestamp > coalesce(%(now)s::timestamptz, statement_timestamp())
      ORDER BY n.spanq_lease_token
      FOR UPDATE OF n) AS held
WHERE ({m_key_columns}) = ({held_key_columns}) AND m.spanq_lease_token = held.spanq_lease_token

-- lease_lapsed --
-- Of a batch of one stream's lease tokens (checked when their leases end):
-- how many still hold their message with the lease over, neither acked,
-- renewed, released nor leased again (lapsed), and how many are still live.
SELECT count(*) FILTER (WHERE m.spanq_lease_expiration_timestamp <= clock.now),
       count(*) FILTER (WHERE m.spanq_lease_expiration_timestamp > clock.now)
FROM {queue} AS m, ({token_keys}) AS f,
     (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
WHERE ({m_key_columns}) = ({f_key_columns}) AND m.spanq_lease_token = f.spanq_token

-- lease_held --
-- Unexpired leases held under one stream's token prefix (for max_outstanding),
-- each token with its lease's end: of the messages whose keys the stream's
-- tokens as this server knows them name (held.py: a superset of its live
-- leases, whose tokens may since have been renewed through another server or
-- SQL, under the same prefix), and of the tokens in the token index (an index
-- range: tokens that do not carry their key, renewed or not). A token is the
-- stream's when it starts with `<prefix>.` and what follows is exactly the
-- fixed fields (a prefix may hold '.': `<prefix>.more.<lease end>...` is
-- another stream's).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT m.spanq_lease_token, m.spanq_lease_expiration_timestamp
FROM {queue} AS m, clock
WHERE ({m_key_columns}) IN (SELECT {f_key_columns} FROM ({token_keys}) AS f)
  AND m.spanq_lease_token >= %(lease_prefix)s || '.' AND m.spanq_lease_token < %(lease_prefix)s || '/'
  AND substr(m.spanq_lease_token, length(%(lease_prefix)s) + 2) ~ '^(-?[0-9]{{1,19}}\.)?([^.~]*~)?[0-9a-f]{{32}}$'
  AND m.spanq_lease_expiration_timestamp > clock.now
UNION
SELECT m.spanq_lease_token, m.spanq_lease_expiration_timestamp
FROM {queue} AS m, clock
WHERE m.spanq_lease_token >= %(lease_prefix)s || '.' AND m.spanq_lease_token < %(lease_prefix)s || '/'
  AND {unkeyed}
  AND substr(m.spanq_lease_token, length(%(lease_prefix)s) + 2) ~ '^(-?[0-9]{{1,19}}\.)?[0-9a-f]{{32}}$'
  AND m.spanq_lease_expiration_timestamp > clock.now

-- message_next_delivery --
-- Seconds until the earliest deliver_time (negative when one is due); no row
-- when empty, or while delivery is paused (nothing becomes deliverable).
-- Messages held behind an earlier one of their ordering key ('infinity')
-- have no time: the removal of that one wakes receivers.
SELECT extract(epoch FROM m.deliver_time - coalesce(%(now)s::timestamptz, statement_timestamp()))::float8
FROM {queue} AS m
WHERE m.deliver_time < 'infinity'
  AND NOT EXISTS (SELECT FROM spanq.queues AS q WHERE q.name = %(queue_name)s AND q.disable_delivery)
ORDER BY m.deliver_time
LIMIT 1

-- message_next_delivery_rate_limited --
-- A rate-limited queue's next delivery (message_next_delivery): no sooner
-- than its bucket holds a whole token again (queue_receive_rate_gate), so a
-- stream the limit held back sleeps until then rather than ask again at once.
SELECT greatest(d.due, (1 - least(b.tokens + {rate_limit} * greatest(extract(epoch FROM
           coalesce(%(now)s::timestamptz, statement_timestamp()) - b.refill_time), 0), {rate_limit_burst}))
       / {rate_limit})::float8
FROM ({next_delivery}) AS d(due)
LEFT JOIN spanq.rate_buckets AS b ON b.queue = %(queue_name)s

-- wakeup_notify --
-- Wakes receivers on every server for a queue whose messages became deliverable without an INSERT (a nack).
SELECT pg_notify('spanq_wakeup', %(queue)s::text)

-- wakeup_listen --
-- The one listening connection per server.
LISTEN spanq_wakeup

-- backend_pid --
-- The pid of the server process serving this statement (to tell a pooler, which hands
-- its clients a pid of its own making, from PostgreSQL).
SELECT pg_backend_pid()

-- ledger_claim --
-- Claims a request_id at the start of its transaction. When another
-- transaction holds the same id, this waits on the unique key until that
-- one ends: no row back means it committed (answer as a replay); a row
-- means it rolled back and this attempt goes ahead. The database, not an
-- application check, closes the race between an original and its replay.
INSERT INTO spanq.commit_ledger (request_id, fingerprint, response, commit_time)
VALUES (%(request_id)s, %(fingerprint)s, '', coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (request_id) DO NOTHING
RETURNING true

-- ledger_record --
-- Stores the response, in the same transaction as the effect it describes.
UPDATE spanq.commit_ledger SET response = %(response)s WHERE request_id = %(request_id)s

-- ledger_lookup --
-- A committed request's fingerprint and recorded response.
SELECT fingerprint, response FROM spanq.commit_ledger WHERE request_id = %(request_id)s

-- ledger_prune --
-- Forgets up to batch_size entries older than the retention window. Small
-- batches and SKIP LOCKED keep pruning from holding long locks or blocking
-- another server's pruning.
DELETE FROM spanq.commit_ledger
WHERE request_id IN (
    SELECT request_id FROM spanq.commit_ledger
    WHERE commit_time < coalesce(%(now)s::timestamptz, statement_timestamp()) - %(retention)s
    ORDER BY commit_time
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED)

-- roster_publish --
-- This server's open streams (a JSON array) as of now, and the rows of servers
-- whose heartbeat is older than stale_after (they died without deleting theirs)
-- deleted, in one round trip. The database's clock, not the server's: a stale
-- row is judged by one clock, whatever the servers' own say.
WITH pruned AS (
    DELETE FROM spanq.stream_roster
    WHERE heartbeat_time < statement_timestamp() - %(stale_after)s AND instance <> %(instance)s)
INSERT INTO spanq.stream_roster (instance, server, streams, heartbeat_time)
VALUES (%(instance)s, %(server)s, %(streams)s, statement_timestamp())
ON CONFLICT (instance) DO UPDATE
SET server = excluded.server, streams = excluded.streams, heartbeat_time = excluded.heartbeat_time

-- roster_withdraw --
-- A stopping server's row, gone at once rather than when its heartbeat goes stale.
DELETE FROM spanq.stream_roster WHERE instance = %(instance)s

-- roster_streams --
-- The open streams of one queue on every other live server (a heartbeat within
-- stale_after), with how long ago each server reported them.
SELECT r.server, s.stream, extract(epoch FROM statement_timestamp() - r.heartbeat_time)::float8
FROM spanq.stream_roster r, jsonb_array_elements(r.streams) AS s(stream)
WHERE r.instance <> %(instance)s
  AND r.heartbeat_time >= statement_timestamp() - %(stale_after)s
  AND s.stream ->> 'queue' = %(queue)s
ORDER BY r.server, s.stream ->> 'opened_at'

-- roster_counts --
-- Open streams per queue on every other live server.
SELECT s.stream ->> 'queue', count(*)
FROM spanq.stream_roster r, jsonb_array_elements(r.streams) AS s(stream)
WHERE r.instance <> %(instance)s
  AND r.heartbeat_time >= statement_timestamp() - %(stale_after)s
GROUP BY 1

-- metrics_begin --
-- Bounds a metrics scrape's transaction: a slow statement fails rather than
-- holding the pool connection (the scrape then answers without queue gauges).
SELECT set_config('statement_timeout', %(statement_timeout)s, true)

-- metrics_queue_gauges --
-- One queue's row of the scrape-time gauges (the rows of all queues are
-- joined by UNION ALL into one statement). Each part is bounded on a deep
-- queue: `ready` counts due messages (neither leased nor scheduled) up to
-- `cap` along the deliver_time index; `stored` counts up to `cap` messages
-- in the table's physical order and `oldest` is the earliest enqueue time
-- among those. The oldest message's age is measured from the earlier of
-- `oldest` and the queue's earliest deliver_time (the index's first entry;
-- a message is never deliverable before it was sent): exact while the queue
-- holds fewer than `cap` messages, and never more than the true age beyond.
-- Then the messages moved to its dead-letter queue so far (one row lookup).
-- Last, what its limits and its ordering hold back: {rate_limited},
-- {key_limited} and {ordering_held}, 0 for a queue without them
-- (metrics_rate_limited, metrics_key_limited, metrics_ordering_held).
SELECT {queue_name}::text,
       (SELECT count(*) FROM (SELECT FROM {queue} AS m WHERE m.deliver_time <= clock.now
                              LIMIT %(cap)s) AS due),
       sample.stored,
       coalesce(greatest(extract(epoch FROM clock.now - least(sample.oldest,
           (SELECT min(m.deliver_time) FROM {queue} AS m)))::float8, 0), 0),
       coalesce((SELECT c.total FROM spanq.dead_letter_counts AS c WHERE c.queue = {queue_name}), 0),
       {rate_limited}, {key_limited}, {ordering_held}
FROM (SELECT count(*) AS stored, min(s.spanq_enqueue_time) AS oldest
      FROM (SELECT m.spanq_enqueue_time FROM {queue} AS m LIMIT %(cap)s) AS s) AS sample,
     (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock

-- metrics_rate_limited --
-- A rate-limited queue's messages held back so far (its bucket's count).
coalesce((SELECT b.held_back FROM spanq.rate_buckets AS b WHERE b.queue = {queue_name}), 0)

-- metrics_key_limited --
-- A key-limited queue's due messages whose key value is at the limit, up to
-- `cap` along the deliver_time index, each by one range of its key slots'
-- index (queue_key_slots_index).
(SELECT count(*) FROM (SELECT FROM {queue} AS m
                       WHERE m.deliver_time <= clock.now
                         AND (SELECT count(*) FROM {queue} AS l
                              WHERE l.{concurrency_key} = m.{concurrency_key}
                                AND l.spanq_lease_expiration_timestamp > clock.now) >= {max_in_flight_per_key}
                       LIMIT %(cap)s) AS held)

-- metrics_ordering_held --
-- An ordering queue's messages held behind an earlier one of their ordering
-- key (deliver_time 'infinity'), up to `cap` along the deliver_time index.
(SELECT count(*) FROM (SELECT FROM {queue} AS m WHERE m.deliver_time = 'infinity'
                       LIMIT %(cap)s) AS held)

-- queue_stats --
-- One queue's figures for GetQueueStats, exact (one pass over the table). A
-- message is ready when due (deliver_time <= now: a held lease always puts
-- deliver_time past its end), leased while its lease has not run out, and
-- scheduled otherwise (a later deliver_time, or a backoff after a failed or
-- expired attempt). The oldest ready message's age is from its enqueue time.
-- Held: waiting behind an earlier message of its ordering key (last).
SELECT count(*) FILTER (WHERE m.deliver_time <= clock.now),
       count(*) FILTER (WHERE m.deliver_time > clock.now AND m.deliver_time < 'infinity'
                          AND NOT coalesce(m.spanq_lease_expiration_timestamp > clock.now, false)),
       count(*) FILTER (WHERE m.deliver_time > clock.now
                          AND coalesce(m.spanq_lease_expiration_timestamp > clock.now, false)),
       coalesce(extract(epoch FROM clock.now - min(m.spanq_enqueue_time)
                        FILTER (WHERE m.deliver_time <= clock.now))::float8, 0),
       clock.now,
       count(*) FILTER (WHERE m.deliver_time = 'infinity')
FROM (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
LEFT JOIN {queue} AS m ON TRUE
GROUP BY clock.now

-- queue_stats_key_limit --
-- A queue with max_in_flight_per_key, for GetQueueStats: its due messages
-- whose key value is at the limit (they wait for a lease of their key to
-- end), and those key values; exact (one pass over the leases and the due).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), busy AS (
    SELECT m.{concurrency_key} AS value
    FROM {queue} AS m, clock
    WHERE m.spanq_lease_expiration_timestamp > clock.now
    GROUP BY m.{concurrency_key}
    HAVING count(*) >= %(max_in_flight_per_key)s
)
SELECT (SELECT count(*) FROM {queue} AS m, clock
        WHERE m.deliver_time <= clock.now AND m.{concurrency_key} IN (SELECT busy.value FROM busy)),
       (SELECT count(*) FROM busy)

-- queue_stats_rate_limit --
-- A rate-limited queue's bucket, for GetQueueStats: the messages the limit
-- kept back, and the tokens it holds now (as queue_receive_rate_gate
-- refills them). No row without a bucket.
SELECT b.held_back,
       least(b.tokens + %(rate_limit)s * greatest(extract(epoch FROM
                 coalesce(%(now)s::timestamptz, statement_timestamp()) - b.refill_time), 0),
             %(burst)s)::float8
FROM spanq.rate_buckets AS b
WHERE b.queue = %(queue)s

-- queue_message_count --
-- How many messages a queue holds (a dead-letter queue's, for GetQueueStats).
SELECT count(*) FROM {queue}

-- queue_dead_letter_sources --
-- The queues that name this one as their dead-letter queue: Redrive's default target.
SELECT name FROM spanq.queues WHERE dead_letter_queue = %(name)s ORDER BY name

-- message_peek --
-- A page of messages in delivery order (deliver_time, then key: a total
-- order, so a page token resumes after the last row shown), without leasing
-- them. {after} is TRUE or a row comparison with the page token's values;
-- the dashboard's filters (each NULL: not filtered) keep messages whose first
-- key column's text starts with key_prefix, in one state, delivered at least
-- min_attempt times, whose payload's text holds text (case folded). A filter
-- reads on in delivery order until it fills the page. A message held behind
-- an earlier one of its ordering key (deliver_time 'infinity', so last, in
-- its key's order) shows the deliver_time it was sent with, and held.
SELECT {key_columns}, m.payload, coalesce(m.spanq_held_deliver_time, m.deliver_time),
       coalesce(m.spanq_lease_expiration_timestamp > clock.now, false) AS leased,
       m.spanq_lease_expiration_timestamp, m.spanq_delivery_attempt, m.spanq_enqueue_time,
       m.deliver_time <= clock.now AS ready, m.spanq_dead_letter_source, m.spanq_dead_letter_attempts,
       m.spanq_dead_letter_time, m.spanq_last_failure, m.spanq_headers, m.spanq_priority,
       m.spanq_ordering_key, m.spanq_held_deliver_time IS NOT NULL AS held
FROM {queue} AS m, (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
WHERE {after}
  AND (%(key_prefix)s::text IS NULL OR starts_with({first_key_column}::text, %(key_prefix)s::text))
  AND (%(state)s::text IS NULL OR %(state)s::text = CASE
         WHEN coalesce(m.spanq_lease_expiration_timestamp > clock.now, false) THEN 'LEASED'
         WHEN m.deliver_time <= clock.now THEN 'READY'
         WHEN m.spanq_held_deliver_time IS NOT NULL THEN 'HELD' ELSE 'SCHEDULED' END)
  AND (%(min_attempt)s::bigint IS NULL OR m.spanq_delivery_attempt >= %(min_attempt)s::bigint)
  AND (%(text)s::text IS NULL OR strpos(lower(m.payload::text), lower(%(text)s::text)) > 0)
ORDER BY m.deliver_time, {key_columns}
LIMIT %(limit)s

-- message_purge --
-- Purge: every message in one statement (so atomically), or only those sent
-- before sent_before.
DELETE FROM {queue} AS m
WHERE %(sent_before)s::timestamptz IS NULL OR m.spanq_enqueue_time < %(sent_before)s::timestamptz

-- message_expire --
-- Deletes up to batch_size unacknowledged messages sent longer ago than the
-- queue's message_retention (leased or not), by row address: small batches and
-- SKIP LOCKED, so expiry never waits for a row a sender, acker or another
-- server's expiry holds, nor holds many itself. Scans the table (no index on
-- enqueue time) until it has a batch.
DELETE FROM {queue}
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {queue}
    WHERE spanq_enqueue_time < coalesce(%(now)s::timestamptz, statement_timestamp()) - %(retention)s
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED))

-- archive_prune --
-- Forgets up to batch_size archived messages acked longer ago than the queue's
-- archive_duration (all of them when it has none now), oldest first by the ack
-- time index, by row address and SKIP LOCKED, as message_expire.
DELETE FROM {archive}
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {archive}
    WHERE spanq_ack_time < coalesce(%(now)s::timestamptz, statement_timestamp()) - %(retention)s
    ORDER BY spanq_ack_time
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED))

-- archive_peek --
-- A page of the archive in ack order (then key), as message_peek pages a
-- queue, with the same columns (ack time for deliver time; no lease, no
-- history), then the ack's time and request_id, and the headers and priority
-- it was sent with; the same filters, of which
-- state matches ACKED only.
SELECT {key_columns}, m.payload, m.deliver_time, false, NULL::timestamptz, m.spanq_delivery_attempt,
       m.spanq_enqueue_time, false, NULL::text, NULL::integer, NULL::timestamptz, NULL::text,
       m.spanq_ack_time, m.spanq_ack_request_id, m.spanq_headers, m.spanq_priority, m.spanq_ordering_key
FROM (SELECT *, spanq_ack_time AS deliver_time FROM {queue}) AS m
WHERE {after}
  AND (%(key_prefix)s::text IS NULL OR starts_with({first_key_column}::text, %(key_prefix)s::text))
  AND (%(state)s::text IS NULL OR %(state)s::text = 'ACKED')
  AND (%(min_attempt)s::bigint IS NULL OR m.spanq_delivery_attempt >= %(min_attempt)s::bigint)
  AND (%(text)s::text IS NULL OR strpos(lower(m.payload::text), lower(%(text)s::text)) > 0)
ORDER BY m.deliver_time, {key_columns}
LIMIT %(limit)s

-- archive_replay --
-- One batch of a Replay, in one statement: sends up to `limit` archived
-- messages of the range back into the queue, in ack order (then key) after
-- the replay's cursor {after}, each with its key, payload, headers and
-- priority, delivery attempt 0, deliverable and enqueued now. A key live in
-- the queue is passed over (ON CONFLICT DO NOTHING: no wait on the archive,
-- no error, nothing overwritten), and so is a second archived copy of one
-- key in the batch. The archive keeps its rows (pruning forgets them, as
-- ever), read without locks. One row: how many rows the batch reached, how
-- many it sent, and the last one's ack time and key (NULLs when none) for
-- the next cursor. {window}: the ack-time range and key bounds.
WITH picked AS (
    SELECT {a_key_columns}, a.payload, a.spanq_headers, a.spanq_priority, a.spanq_ack_time
    FROM {archive} AS a
    WHERE {after} AND {window}
    ORDER BY a.spanq_ack_time, {a_key_columns}
    LIMIT %(limit)s
), sent AS (
    INSERT INTO {queue} ({sent_key_columns}, payload, spanq_headers, spanq_priority)
    SELECT {p_sent_key_columns}, p.payload, p.spanq_headers, p.spanq_priority
    FROM picked AS p
    ORDER BY p.spanq_ack_time, {p_key_columns}
    ON CONFLICT DO NOTHING
    RETURNING 1
), last AS (
    SELECT p.spanq_ack_time, {p_key_columns} FROM picked AS p ORDER BY p.spanq_ack_time DESC, {p_key_descending}
    LIMIT 1
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM sent), last.*
FROM (SELECT) AS one LEFT JOIN last ON true

-- archive_replay_left --
-- How many archived messages of a Replay's range lie after its cursor.
SELECT count(*) FROM {archive} AS a WHERE {after} AND {window}

-- archive_replay_window --
-- A Replay's range over the archive `a`: acked in [start_time, end_time)
-- (no start: from the oldest kept; no end, only when counting: until now),
-- keys within {key_bounds}.
(%(start_time)s::timestamptz IS NULL OR a.spanq_ack_time >= %(start_time)s::timestamptz)
AND (%(end_time)s::timestamptz IS NULL OR a.spanq_ack_time < %(end_time)s::timestamptz) AND {key_bounds}

-- archive_replay_after --
-- A Replay's cursor: rows after the last one a batch reached, in ack order then key.
(a.spanq_ack_time, {a_key_columns}) > ({values})

-- archive_key_from --
-- A Replay's lowest key, included.
({a_key_columns}) >= ({values})

-- archive_key_to --
-- A Replay's highest key, included.
({a_key_columns}) <= ({values})

-- ledger_hold --
-- A Replay's entry in the commit ledger, claimed on its first batch or, made
-- by an earlier batch, locked until this batch's transaction ends: a second
-- call of the same request_id waits here and then reads the cursor this one
-- recorded, so no two batches send the same messages. Its fingerprint, the
-- progress recorded (empty on the first batch), and the entry's time, which
-- moves to now: a replay is remembered for the ledger's window after its
-- last batch.
INSERT INTO spanq.commit_ledger AS l (request_id, fingerprint, response, commit_time)
VALUES (%(request_id)s, %(fingerprint)s, '', coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (request_id) DO UPDATE SET commit_time = excluded.commit_time
RETURNING l.fingerprint, l.response, l.commit_time

-- message_redrive --
-- One batch of a Redrive, in one statement: deletes up to `limit` messages
-- from the dead-letter queue and sends them to the target (delivery attempt
-- 0, deliverable now, their first enqueue time kept). Leased messages stay
-- (a receiver of the dead-letter queue holds them), and so do messages whose
-- key the target already holds, so nothing is overwritten or lost; SKIP
-- LOCKED leaves rows another redrive or receiver is taking. A key sent to the
-- target between the check and the insert fails the statement (a unique
-- violation), and the whole batch stays where it was. {source} is TRUE, or
-- picks the messages of one recorded source queue (or of none recorded).
-- A message goes back with its ordering key, behind the messages of its key
-- the target holds, when the target has enable_message_ordering (else without it).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), moving AS (
    SELECT {d_key_columns}
    FROM {dead_letter_queue} AS d, clock
    WHERE NOT coalesce(d.spanq_lease_expiration_timestamp > clock.now, false)
      AND NOT EXISTS (SELECT FROM {target} AS t WHERE ({t_key_columns}) = ({d_key_columns}))
      AND {source}
    ORDER BY d.deliver_time
    LIMIT %(limit)s
    FOR UPDATE OF d SKIP LOCKED
), moved AS (
    DELETE FROM {dead_letter_queue} AS d USING moving
    WHERE ({d_key_columns}) = ({moving_key_columns})
    RETURNING {d_moved_key_columns}, d.payload, d.spanq_enqueue_time, d.spanq_headers, d.spanq_priority,
              CASE WHEN (SELECT q.enable_message_ordering FROM spanq.queues AS q WHERE q.name = {target_name})
                   THEN d.spanq_ordering_key END
)
INSERT INTO {target} ({target_key_columns}, payload, spanq_enqueue_time, spanq_headers, spanq_priority,
                      spanq_ordering_key)
SELECT * FROM moved

-- message_delete_one --
-- The dashboard's delete: one message by key, leased or not (its holder's ack
-- then finds it gone).
DELETE FROM {queue} AS m WHERE ({m_key_columns}) = ({key})

-- message_release_one --
-- The dashboard's release now: a leased message deliverable at once, its
-- lease taken back (the holder's ack or renewal then finds its token stale);
-- the delivery attempt stays counted, as a nack's does. Other servers' streams
-- learn of it by the notification in the same statement.
WITH released AS (
    UPDATE {queue} AS m SET spanq_lease_token = NULL, spanq_lease_expiration_timestamp = NULL,
                            deliver_time = clock.now
    FROM (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
    WHERE ({m_key_columns}) = ({key}) AND coalesce(m.spanq_lease_expiration_timestamp > clock.now, false)
    RETURNING 1
)
SELECT count(*), pg_notify('spanq_wakeup', %(queue_name)s::text) FROM released HAVING count(*) > 0

-- message_redrive_left --
-- What a Redrive leaves in the dead-letter queue: all messages, and those it
-- cannot move now (leased, or their key already in the target).
SELECT count(*),
       count(*) FILTER (WHERE coalesce(d.spanq_lease_expiration_timestamp > clock.now, false)
                           OR EXISTS (SELECT FROM {target} AS t WHERE ({t_key_columns}) = ({d_key_columns})))
FROM {dead_letter_queue} AS d, (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS clock
WHERE {source}

-- message_redrive_sources --
-- The source queues a dead-letter queue's messages recorded (NULL: a message
-- sent there, or moved before migration 0008): Redrive's default targets.
SELECT DISTINCT d.spanq_dead_letter_source FROM {dead_letter_queue} AS d

-- spanner_names_put --
-- Records how a Spanner DDL spelled a queue's names, and the database it was
-- created through (spanner/query/names.py); a queue dropped meanwhile gets no row.
INSERT INTO spanq.spanner_names (queue, database, spelled)
SELECT name, %(database)s, %(spelled)s FROM spanq.queues WHERE name = %(queue)s
ON CONFLICT (queue) DO UPDATE SET spelled = excluded.spelled, database = excluded.database

-- spanner_names_get --
-- How a Spanner DDL spelled a queue's names, if one created it.
SELECT spelled FROM spanq.spanner_names WHERE queue = %(queue)s

-- spanner_database_queues --
-- The queues a Spanner database's DDL created, in name order.
SELECT queue FROM spanq.spanner_names WHERE database = %(database)s ORDER BY queue

-- spanner_instance_put --
-- Records a Spanner instance; false when one of the name exists.
INSERT INTO spanq.spanner_instances (name, instance) VALUES (%(name)s, %(record)s)
ON CONFLICT (name) DO NOTHING
RETURNING true

-- spanner_instance_get --
SELECT instance FROM spanq.spanner_instances WHERE name = %(name)s

-- spanner_instance_list --
-- A project's instances in name order.
SELECT instance FROM spanq.spanner_instances WHERE starts_with(name, %(prefix)s) ORDER BY name

-- spanner_instance_delete --
-- Forgets an instance and (by cascade) its databases.
DELETE FROM spanq.spanner_instances WHERE name = %(name)s RETURNING true

-- spanner_database_put --
-- Records a Spanner database and gives it a namespace; no row when one of the name exists.
INSERT INTO spanq.spanner_databases (name, instance, database) VALUES (%(name)s, %(instance)s, %(record)s)
ON CONFLICT (name) DO NOTHING
RETURNING true

-- spanner_database_namespace --
-- The prefix of a Spanner database's queues, and its record (for its dialect).
SELECT namespace, database FROM spanq.spanner_databases WHERE name = %(name)s

-- spanner_database_get --
SELECT database FROM spanq.spanner_databases WHERE name = %(name)s

-- spanner_database_list --
-- An instance's databases in name order.
SELECT database FROM spanq.spanner_databases WHERE instance = %(instance)s ORDER BY name

-- spanner_database_delete --
DELETE FROM spanq.spanner_databases WHERE name = %(name)s RETURNING true

-- spanner_table_put --
-- Registers a table or index made through the Spanner API (spanner/query/tables.py), in its DDL's transaction.
INSERT INTO spanq.spanner_tables (name, database, kind, declared, definition)
VALUES (%(name)s, %(database)s, %(kind)s, %(declared)s, %(definition)s)

-- spanner_table_redefine --
-- A table's definition after ALTER TABLE (spanner/query/tables.py), in its DDL's transaction.
UPDATE spanq.spanner_tables SET definition = %(definition)s WHERE name = %(name)s AND kind = 'table'

-- spanner_table_get --
-- The registered ones of some relation names: (name, kind, definition).
SELECT name, kind, definition FROM spanq.spanner_tables WHERE name = ANY(%(names)s)

-- spanner_tables_of_database --
-- A Spanner database's tables and indexes, in creation order.
SELECT name, kind, definition FROM spanq.spanner_tables WHERE database = %(database)s ORDER BY created

-- spanner_table_delete --
-- Forgets a table or index, in the transaction of the DDL that drops it.
DELETE FROM spanq.spanner_tables WHERE name = %(name)s

-- spanner_table_indexes --
-- A table's indexes.
SELECT name FROM spanq.spanner_tables WHERE kind = 'index' AND definition ->> 'table' = %(table)s

-- spanner_table_children --
-- A table's interleaved child tables.
SELECT name FROM spanq.spanner_tables WHERE kind = 'table' AND definition ->> 'parent' = %(table)s

-- spanner_table_lock_timeout --
-- How long a Spanner table's DDL waits for its locks (this transaction only).
SELECT set_config('lock_timeout', %(lock_timeout)s, true)

-- spanner_table_outside_dependents --
-- What depends on one of the relations `names` from outside them: a foreign key (an interleaved
-- table or queue, or psql's), a view, a queue's dead-letter queue; (dependent, relation).
WITH mine AS (SELECT n AS name, to_regclass(format('public.%%I', n)) AS oid FROM unnest(%(names)s::text[]) AS n),
     oids AS (SELECT oid FROM mine WHERE oid IS NOT NULL)
SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint AS c
WHERE c.contype = 'f' AND c.confrelid IN (SELECT oid FROM oids) AND c.conrelid NOT IN (SELECT oid FROM oids)
UNION
SELECT r.ev_class::regclass::text, d.refobjid::regclass::text
FROM pg_depend AS d JOIN pg_rewrite AS r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
WHERE d.refobjid IN (SELECT oid FROM oids) AND r.ev_class NOT IN (SELECT oid FROM oids)
UNION
SELECT q.name, q.dead_letter_queue FROM spanq.queues AS q
WHERE q.dead_letter_queue IN (SELECT name FROM mine) AND q.name NOT IN (SELECT name FROM mine)
ORDER BY 1, 2

-- spanner_proto_bundle_get --
-- A database's proto bundle: its types and descriptors (no row: it has none).
SELECT types, descriptors FROM spanq.spanner_proto_bundles WHERE database = %(database)s

-- spanner_proto_bundle_create --
-- Makes a database's proto bundle (CREATE PROTO BUNDLE); no row when it has one.
INSERT INTO spanq.spanner_proto_bundles (database, types, descriptors)
VALUES (%(database)s, %(types)s, %(descriptors)s)
ON CONFLICT (database) DO NOTHING
RETURNING true

-- spanner_proto_bundle_replace --
-- Replaces a database's proto bundle (ALTER PROTO BUNDLE) if it is still the one
-- the statement was checked against: no row when another change came first.
UPDATE spanq.spanner_proto_bundles SET types = %(types)s, descriptors = %(descriptors)s
WHERE database = %(database)s AND types = %(previous_types)s AND descriptors = %(previous)s
RETURNING true

-- spanner_proto_bundle_delete --
DELETE FROM spanq.spanner_proto_bundles WHERE database = %(database)s RETURNING true

-- spanner_role_put --
-- Creates a database role (CREATE ROLE); no row when one of the name exists.
INSERT INTO spanq.spanner_roles (database, name, spelled) VALUES (%(database)s, %(name)s, %(spelled)s)
ON CONFLICT (database, name) DO NOTHING
RETURNING true

-- spanner_role_delete --
DELETE FROM spanq.spanner_roles WHERE database = %(database)s AND name = %(name)s RETURNING true

-- spanner_roles_list --
-- A database's roles, in the order they were made, with their privileges.
SELECT name, spelled, grants FROM spanq.spanner_roles WHERE database = %(database)s ORDER BY created, name

-- spanner_roles_lock --
-- The roles a GRANT or REVOKE changes, locked until it commits (two GRANTs to one
-- role never lose either's privileges).
SELECT name, grants FROM spanq.spanner_roles
WHERE database = %(database)s AND name = ANY(%(names)s)
ORDER BY name
FOR UPDATE

-- spanner_role_grants_set --
UPDATE spanq.spanner_roles SET grants = %(grants)s WHERE database = %(database)s AND name = %(name)s
