-- Dead letters keep their history: every queue table gets the columns of
-- queue_history_columns_add (queries.sql: the source queue, the attempts,
-- the move's time, the last failure), added by the store to each existing
-- queue on the marker below; the receive functions are re-created to fill
-- them and to leave a message whose key the dead-letter queue holds already
-- where it is (it was deleted and lost):
-- spanq: add queue history columns
-- spanq: recreate queue functions
--
-- Messages moved to a dead-letter queue, by source queue (the metric
-- spanq_queue_messages_dead_lettered_total); dropping the queue forgets its row.
CREATE TABLE spanq.dead_letter_counts (
    queue text PRIMARY KEY REFERENCES spanq.queues (name) ON DELETE CASCADE,
    total bigint NOT NULL
);
