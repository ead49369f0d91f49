-- Ordering keys, opt-in per queue (spanq.queues.enable_message_ordering,
-- Pub/Sub's subscription setting of that name): every queue table gets
-- spanq_ordering_key (NULL: none), spanq_ordering_seq and
-- spanq_held_deliver_time, and archives keep the key. Existing queues get
-- ordering disabled: no ordering index and no hold/promote triggers, only the
-- row trigger that refuses a keyed message (queue_ordering_drop in
-- queries.sql); UpdateQueue enables it (queue_ordering_create). The new
-- columns are NULL and the default constant, so this rewrites and reads no
-- table. The receive function returns the key: its result columns change, so
-- the store drops and re-creates it with its grants
-- (CatalogTables._recreate_queue_functions).
-- spanq: add queue history columns
-- spanq: add queue archives
-- spanq: recreate queue functions
ALTER TABLE spanq.queues ADD COLUMN enable_message_ordering boolean NOT NULL DEFAULT false;
--
-- One row per ordering key that has messages in a queue with ordering: what
-- one key's sends and removals lock, to take turns (its row lock). It holds
-- nothing else, so a row deleted or never made costs nothing but its re-insert.
CREATE TABLE spanq.ordering_keys (
    queue        text NOT NULL,
    ordering_key text COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, ordering_key)
);
-- A queue without enable_message_ordering refuses a message with a key
-- (its trigger spanq_ordering_off), saying how to enable it: a check_violation
-- named spanq_ordering_enabled (the store answers it FAILED_PRECONDITION).
CREATE FUNCTION spanq.ordering_off() RETURNS trigger
LANGUAGE plpgsql AS $off$
BEGIN
    RAISE EXCEPTION 'queue % does not have message ordering enabled: a message cannot have an ordering key there',
                    TG_TABLE_NAME
        USING ERRCODE = 'check_violation', CONSTRAINT = 'spanq_ordering_enabled', TABLE = TG_TABLE_NAME,
              COLUMN = 'spanq_ordering_key',
              HINT = format('enable it with UpdateQueue (enable_message_ordering), e.g. spanq queue update %s '
                            '--ordering, or send without an ordering key', TG_TABLE_NAME);
END
$off$;
