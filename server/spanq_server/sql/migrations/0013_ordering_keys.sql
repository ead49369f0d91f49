-- Ordering keys: every queue table gets spanq_ordering_key (NULL: none),
-- spanq_ordering_seq and spanq_held_deliver_time, the ordering index, and
-- the triggers that hold a key's later messages back until its earlier one
-- leaves the queue (queue_ordering_create in queries.sql); archives keep the
-- key. The receive function returns the key: its result columns change, so
-- the store drops and re-creates it with its grants
-- (CatalogTables._recreate_queue_functions). The new columns are NULL, so
-- adding them rewrites no table; only the (partial, empty) index reads each
-- queue's table, once.
-- spanq: add queue history columns
-- spanq: add queue archives
-- spanq: recreate queue functions
--
-- One row per ordering key that has messages in a queue: what one key's
-- sends and removals lock, to take turns (its row lock). It holds nothing
-- else, so a row deleted or never made costs nothing but its re-insert.
CREATE TABLE spanq.ordering_keys (
    queue        text NOT NULL,
    ordering_key text COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, ordering_key)
);
