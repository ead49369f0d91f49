-- Per-key concurrency and a queue-wide rate limit, held in PostgreSQL so that
-- every server, stream and psql session shares them (queue_receive_key_limit
-- and queue_receive_rate_gate in queries.sql, spliced into a limited queue's
-- receive function only: an unlimited queue's function is as it was).
-- Existing queues are unlimited: their functions stand as they are.
ALTER TABLE spanq.queues
    -- At most this many unexpired leases per value of the key column
    -- concurrency_key. NULL: no limit.
    ADD COLUMN max_in_flight_per_key integer,
    ADD COLUMN concurrency_key text,
    -- Leases per second across the queue, a token bucket of rate_limit_burst
    -- tokens (spanq.rate_buckets). NULL: no limit.
    ADD COLUMN rate_limit double precision,
    ADD COLUMN rate_limit_burst integer;

-- One token bucket per rate-limited queue, taken under its row lock by every
-- lease of the queue: tokens as of refill_time, refilled at rate_limit per
-- second up to the burst. held_back counts the messages ready for a batch
-- that the limit kept back (QueueStats, spanq_queue_rate_limited_total);
-- dropping the queue forgets its row.
CREATE TABLE spanq.rate_buckets (
    queue       text PRIMARY KEY REFERENCES spanq.queues (name) ON DELETE CASCADE,
    tokens      double precision NOT NULL,
    refill_time timestamptz NOT NULL,
    held_back   bigint NOT NULL DEFAULT 0
);
