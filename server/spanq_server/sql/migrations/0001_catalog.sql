-- The queue catalog and the wake-up trigger function shared by every queue.

CREATE TABLE spanq.queues (
    name                  text PRIMARY KEY,
    key_columns           jsonb NOT NULL,        -- [{"name": "id", "type": "STRING"}, ...]
    payload_type          text NOT NULL,         -- BYTES, STRING or JSON
    key_generated         boolean NOT NULL,      -- created without keys: sends may omit them
    parent_table          text,
    lease_duration        interval NOT NULL,
    initial_backoff       interval NOT NULL,
    max_backoff           interval NOT NULL,
    max_delivery_attempts integer,
    -- RESTRICT: a queue cannot be dropped while another sends its dead letters to it.
    dead_letter_queue     text REFERENCES spanq.queues (name) ON DELETE RESTRICT,
    create_time           timestamptz NOT NULL DEFAULT now()
);

-- One NOTIFY per sending transaction and queue: PostgreSQL folds identical
-- (channel, payload) pairs within a transaction, so a statement trigger costs
-- one notification however many rows or statements the transaction inserts.
CREATE FUNCTION spanq.notify_send() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('spanq_wakeup', TG_TABLE_NAME);
    RETURN NULL;
END
$$;
