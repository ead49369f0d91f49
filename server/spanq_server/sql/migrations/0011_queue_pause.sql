-- Settings a live queue may change (UpdateQueue). Durable pauses per queue, Spanner's disable_send and disable_delivery queue
-- options, set through UpdateQueue: a paused send is refused by the servers;
-- a paused delivery is written into the queue's receive function, which
-- UpdateQueue re-creates (existing queues start unpaused: their functions
-- stand as they are). A constant default: no table rewrite.
ALTER TABLE spanq.queues
    ADD COLUMN disable_send boolean NOT NULL DEFAULT false,
    ADD COLUMN disable_delivery boolean NOT NULL DEFAULT false,
    -- Spanner's ROW DELETION POLICY: unacknowledged messages older than this
    -- (by enqueue time) are deleted in the background. NULL: kept.
    ADD COLUMN message_retention interval,
    -- Acked messages are kept this long in the queue's archive, a table
    -- spanq.archive_<queue> (queue_archive_create), made by the store for each
    -- existing queue on the marker below. NULL: an ack deletes.
    ADD COLUMN archive_duration interval;
-- spanq: add queue archives
