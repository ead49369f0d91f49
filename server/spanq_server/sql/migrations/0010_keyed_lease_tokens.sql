-- Lease tokens now carry their message's key (lease_token_new in
-- queries.sql), so that a renewal, an ack by token and a stream's held count
-- find the row by primary key, and the token index holds only the tokens
-- that do not carry it (lease_token_index): a lease writes one index entry
-- fewer per message. Each queue's index is narrowed to those tokens, and the
-- receive and renew functions re-created to make and read the new tokens:
-- spanq: recreate queue functions
--
-- Tokens granted before this migration carry no key: they stay in the
-- narrowed index, and renew, ack, count and lapse as before until their
-- leases end (a renewal gives them a token of the new form).
--
-- The predicate is lease_token_unkeyed's, written out: the planner matches
-- the index to the queries by it.
DO $migration$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT name FROM spanq.queues ORDER BY name LOOP
        EXECUTE format('DROP INDEX IF EXISTS public.%I', 'spanq_lt_' || q);
        EXECUTE format('CREATE UNIQUE INDEX %I ON public.%I (spanq_lease_token) '
                       'WHERE spanq_lease_token IS NOT NULL '
                       'AND substr(spanq_lease_token, length(spanq_lease_token) - 32, 1) <> ''~''',
                       'spanq_lt_' || q, q);
    END LOOP;
END
$migration$;
