-- Messages carry headers (a small string map, trace context among them) and
-- a priority: every queue table gets spanq_headers and spanq_priority and
-- the priority index (queue_history_columns_add in queries.sql), and its
-- receive function returns both and leases higher priorities first. Its
-- result columns change, so the store drops and re-creates it, giving its
-- EXECUTE grants back (CatalogTables._recreate_queue_functions). The
-- priority's CHECK is NOT VALID (the rows there are hold 0), so only the
-- index build reads each queue's table, once:
-- spanq: add queue history columns
-- spanq: recreate queue functions
--
-- The header limits of spanq.v1 (SendMessage.headers), held on every write
-- that sets headers, an INSERT from psql included, by the trigger
-- spanq_headers_limits of each queue (queue_history_columns_add): an object
-- of at most 32 string values of at most 1024 bytes, keys of 1 to 128
-- letters, digits and `-_.:/`. What every write path of the server checks
-- first (mutations.py).
CREATE FUNCTION spanq.headers_ok(headers jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $headers$
SELECT headers IS NULL OR (
    jsonb_typeof(headers) = 'object'
    AND (SELECT count(*) <= 32
                AND coalesce(bool_and(h.key ~ '^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$'
                                      AND jsonb_typeof(h.value) = 'string'
                                      AND octet_length(h.value #>> '{}') <= 1024), true)
         FROM jsonb_each(headers) AS h))
$headers$;

CREATE FUNCTION spanq.headers_check() RETURNS trigger
LANGUAGE plpgsql
AS $check$
BEGIN
    IF NOT spanq.headers_ok(NEW.spanq_headers) THEN
        RAISE EXCEPTION 'headers outside the limits: at most 32, keys of 1 to 128 letters, digits and -_.:/ (a letter or digit first), string values of at most 1024 bytes'
            USING ERRCODE = 'check_violation', TABLE = TG_TABLE_NAME, COLUMN = 'spanq_headers';
    END IF;
    RETURN NEW;
END
$check$;
