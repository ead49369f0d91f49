-- Queues created before this version get the planner settings that
-- queue_receive_function_create (queries.sql) now gives their receive function:
-- without them each batch hashes the whole queue table.

DO $migration$
DECLARE
    receive regprocedure;
BEGIN
    FOR receive IN
        SELECT to_regprocedure(format('spanq.%I(integer, interval, text, timestamptz)', 'receive_' || name))
        FROM spanq.queues
    LOOP
        IF receive IS NOT NULL THEN
            EXECUTE format('ALTER FUNCTION %s SET enable_hashjoin = off', receive);
            EXECUTE format('ALTER FUNCTION %s SET enable_mergejoin = off', receive);
            EXECUTE format('ALTER FUNCTION %s SET jit = off', receive);
        END IF;
    END LOOP;
END
$migration$
