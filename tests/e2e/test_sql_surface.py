"""The SQL surface, as psql users and applications' own transactions use it:
send is an INSERT, receive and renew are SQL functions, ack is a DELETE by
key whose row count the application checks. The last test replays README.md's
"From psql" session with the real psql."""

import re
from datetime import timedelta

import grpc
import psycopg
import pytest

from spanq_proto.v1 import queue_pb2
from spanq_server.store import Store

from ..helpers import create_queue, duration, error_of, key, plain, receive_some, send, text_message
from ..readme_session import replay

RECEIVE_COLUMNS = ["id", "payload", "deliver_time", "spanq_lease_token", "spanq_lease_expiration_timestamp",
                   "spanq_delivery_attempt", "spanq_enqueue_time", "spanq_last_batch_message", "spanq_headers",
                   "spanq_priority", "spanq_ordering_key"]
RENEW_COLUMNS = ["spanq_old_lease_token", "spanq_new_lease_token", "spanq_lease_expiration_timestamp"]


@pytest.fixture
async def tasks(stub, sql):
    """Queue `tasks` (key id STRING, STRING payload, 10 s leases) and a plain table `orders`."""
    await create_queue(stub, "tasks", key_columns=[queue_pb2.KeyColumn(name="id", type=queue_pb2.STRING)],
                       payload_type=queue_pb2.STRING)
    sql.execute("CREATE TABLE orders (id integer PRIMARY KEY, receipts_sent integer NOT NULL DEFAULT 0)")
    return "tasks"


def receive(sql: psycopg.Connection, n: int, *args: str) -> list[dict]:
    extra = "".join(f", {a}" for a in args)
    cur = sql.execute(f"SELECT * FROM spanq.receive_tasks({n}{extra})")  # test-owned text, no user input
    assert cur.description is not None
    assert [c.name for c in cur.description] == RECEIVE_COLUMNS
    return [dict(zip(RECEIVE_COLUMNS, row)) for row in cur.fetchall()]


def renew(sql: psycopg.Connection, tokens: list[str], *args: str) -> list[dict]:
    extra = "".join(f", {a}" for a in args)
    cur = sql.execute(f"SELECT * FROM spanq.renewlease_tasks(%s{extra})", [tokens])
    assert cur.description is not None
    assert [c.name for c in cur.description] == RENEW_COLUMNS
    return [dict(zip(RENEW_COLUMNS, row)) for row in cur.fetchall()]


def db_now(sql: psycopg.Connection):
    return sql.execute("SELECT now()").fetchone()[0]


async def test_insert_sends_and_receive_function_leases(stub, sql, tasks):
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'hello')")
    before = db_now(sql)
    [row] = receive(sql, 1)
    after = db_now(sql)
    assert row["id"] == "k1" and row["payload"] == "hello" and row["spanq_delivery_attempt"] == 1
    assert row["spanq_lease_token"].startswith("sql.") and row["spanq_last_batch_message"] is True
    # The queue's lease_duration (10 s) from now.
    assert before + timedelta(seconds=10) <= row["spanq_lease_expiration_timestamp"] <= after + timedelta(seconds=10)
    assert row["spanq_enqueue_time"] <= row["deliver_time"] <= before
    # The table holds the lease; the message is not deliverable again while it lasts, by SQL or gRPC.
    assert sql.execute("SELECT spanq_lease_token FROM tasks WHERE id = 'k1'").fetchone() == (row["spanq_lease_token"],)
    assert receive(sql, 1) == []
    assert await receive_some(stub, "tasks", 1, timeout=0.3) == []

    # A batch: up to max_batch_size rows, the last one flagged; an explicit lease duration.
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k2', 'two'), ('k3', 'three'), ('k4', 'four')")
    batch = receive(sql, 2, "interval '1 minute'")
    assert len(batch) == 2 and [r["spanq_last_batch_message"] for r in batch] == [False, True]
    assert all(r["spanq_lease_expiration_timestamp"] > after + timedelta(seconds=55) for r in batch)
    [last] = receive(sql, 5)
    assert last["spanq_last_batch_message"] is True
    assert {r["id"] for r in batch + [last]} == {"k2", "k3", "k4"}


async def test_renewlease_function(stub, sql, tasks):
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'hello')")
    [row] = receive(sql, 1)
    old = row["spanq_lease_token"]
    [renewed] = renew(sql, [old])
    new = renewed["spanq_new_lease_token"]
    assert renewed["spanq_old_lease_token"] == old and new and new != old and new.startswith("sql.")
    assert renewed["spanq_lease_expiration_timestamp"] > row["spanq_lease_expiration_timestamp"]
    # A superseded token is unrenewable: a row with NULLs until its lease would have
    # ended. No row for an unknown or expired token; one row per live token.
    assert renew(sql, [old]) == [unrenewable(old)]
    assert renew(sql, ["no-such-token"]) == []
    again, superseded = sorted(renew(sql, [new, "no-such-token", old]), key=lambda r: r["spanq_old_lease_token"] != new)
    assert again["spanq_old_lease_token"] == new and superseded == unrenewable(old)
    newest = again["spanq_new_lease_token"]
    assert renew(sql, [newest], "interval '10 seconds'", "now() + interval '1 hour'") == []

    # SQL and gRPC share the leases: the superseded token cannot ack, the current one can.
    code, _, info = await error_of(stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=key("k1"), lease_token=new)])))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and info["reason"] == "LEASE_NOT_HELD"
    acked = await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=key("k1"), lease_token=newest)]))
    assert [r.acked for r in acked.results] == [True]
    # An acknowledged message's token: a row with a NULL new token, as in Spanner.
    assert renew(sql, [newest]) == [unrenewable(newest)]


def unrenewable(token: str) -> dict:
    return {"spanq_old_lease_token": token, "spanq_new_lease_token": None, "spanq_lease_expiration_timestamp": None}


def at(instant) -> str:
    """The renew function's `now` argument, pinning its clock (test-owned text)."""
    return f"timestamptz '{instant.isoformat()}'"


async def test_renewlease_answers_an_acked_token_until_its_lease_would_have_ended(stub, sql, tasks):
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'one'), ('k2', 'two')")
    first, second = receive(sql, 2, "interval '1 minute'")
    acked, live = first["spanq_lease_token"], second["spanq_lease_token"]
    ends = first["spanq_lease_expiration_timestamp"]
    assert sql.execute("DELETE FROM tasks WHERE id = %s", [first["id"]]).rowcount == 1

    # Acked, lease not over: one row, NULL new token and expiry. The live token in the
    # same call still renews; unparseable ones return no row.
    garbage = ["", "garbage", "sql." + "0" * 32, "sql.soon." + "0" * 32, acked.upper(), acked + "0", None]
    rows = renew(sql, [acked, live, *garbage], "interval '1 minute'", at(ends - timedelta(seconds=30)))
    by_token = {r["spanq_old_lease_token"]: r for r in rows}
    assert set(by_token) == {acked, live}
    assert by_token[acked] == unrenewable(acked)
    renewed = by_token[live]["spanq_new_lease_token"]
    assert renewed and renewed.startswith("sql.") and renewed != live
    assert by_token[live]["spanq_lease_expiration_timestamp"] == ends + timedelta(seconds=30)
    # The same, by the real clock.
    assert renew(sql, [acked]) == [unrenewable(acked)]

    # Up to the last microsecond of its lease, then no row: it is expired.
    assert renew(sql, [acked], "interval '10 seconds'", at(ends - timedelta(microseconds=1))) == [unrenewable(acked)]
    assert renew(sql, [acked], "interval '10 seconds'", at(ends)) == []
    assert renew(sql, [acked], "interval '10 seconds'", at(ends + timedelta(hours=1))) == []

    # A token renewed away answers the same way until the lease it had would have ended
    # (the batch's leases end together), though its message's lease goes on.
    assert second["spanq_lease_expiration_timestamp"] == ends
    assert renew(sql, [live], "interval '10 seconds'", at(ends - timedelta(microseconds=1))) == [unrenewable(live)]
    assert renew(sql, [live], "interval '10 seconds'", at(ends)) == []
    assert renew(sql, [renewed], "interval '10 seconds'", at(ends))[0]["spanq_new_lease_token"]


async def test_renewlease_answers_a_released_token_with_nulls_until_its_lease_would_have_ended(stub, sql, tasks):
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'one')")
    [row] = receive(sql, 1, "interval '1 minute'")
    token, ends = row["spanq_lease_token"], row["spanq_lease_expiration_timestamp"]
    # A nack (lease_duration 0) answers with no new token, and so does the released token afterwards.
    assert renew(sql, [token], "interval '0'") == [unrenewable(token)]
    assert sql.execute("SELECT spanq_lease_token FROM tasks").fetchone() == (None,)
    assert renew(sql, [token]) == [unrenewable(token)]
    assert renew(sql, [token], "interval '10 seconds'", at(ends)) == []
    # Nothing records which tokens were issued: a well-formed token with a lease end
    # ahead is unrenewable, not unknown.
    forged = token.rsplit(".", 1)[0] + "." + "0" * 32
    assert renew(sql, [forged]) == [unrenewable(forged)]


async def test_migration_gives_existing_queues_the_new_functions(stub, sql, tasks, database_url):
    # The queue as before migration 0004: a renew function that answers nothing for an
    # acked token (a stand-in for the old one), a receive function without its settings,
    # and a lease held under a token of the old shape.
    sql.execute("""
        CREATE OR REPLACE FUNCTION spanq.renewlease_tasks(
            lease_tokens text[], lease_duration interval DEFAULT '10 seconds', now timestamptz DEFAULT NULL)
        RETURNS TABLE (spanq_old_lease_token text, spanq_new_lease_token text,
                       spanq_lease_expiration_timestamp timestamptz)
        LANGUAGE sql AS $$ SELECT NULL::text, NULL::text, NULL::timestamptz WHERE false $$""")
    sql.execute("ALTER FUNCTION spanq.receive_tasks RESET ALL")
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('old', 'leased before'), ('new', 'leased after')")
    old_token = "sql." + "ab" * 16
    sql.execute("UPDATE tasks SET spanq_lease_token = %s, spanq_lease_expiration_timestamp = now() + interval '1 minute', "
                "deliver_time = now() + interval '1 minute' WHERE id = 'old'", [old_token])
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 4")

    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [4]

    settings = sql.execute("SELECT proconfig FROM pg_proc WHERE proname = 'receive_tasks'").fetchone()
    assert settings == (["enable_hashjoin=off", "enable_mergejoin=off", "jit=off"],)
    [row] = receive(sql, 1)
    assert row["id"] == "new" and re.fullmatch(r"sql\.\d{16}\.new~[0-9a-f]{32}", row["spanq_lease_token"])
    assert sql.execute("DELETE FROM tasks WHERE id = 'new'").rowcount == 1
    assert renew(sql, [row["spanq_lease_token"]]) == [unrenewable(row["spanq_lease_token"])]
    # A lease granted before the migration renews, to a token of the new shape with its prefix.
    [renewed] = renew(sql, [old_token])
    assert re.fullmatch(r"sql\.\d{16}\.old~[0-9a-f]{32}", renewed["spanq_new_lease_token"])
    # Once superseded, a token of the old shape carries no lease end: no row, as before.
    assert renew(sql, [old_token]) == []


DOTTED_TOKEN = r"billing\.worker-1\.\d{16}\.k1~[0-9a-f]{32}"


async def test_a_lease_prefix_with_dots_survives_renewal(stub, sql, tasks, database_url):
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'one'), ('k2', 'two'), ('k3', 'three')")
    [row] = receive(sql, 1, "interval '1 minute'", "'billing.worker-1'")
    assert re.fullmatch(DOTTED_TOKEN, row["spanq_lease_token"])
    # Renewal keeps the whole prefix, however often (it used to keep 'billing' only).
    [renewed] = renew(sql, [row["spanq_lease_token"]])
    assert re.fullmatch(DOTTED_TOKEN, renewed["spanq_new_lease_token"])
    [again] = renew(sql, [renewed["spanq_new_lease_token"]])
    assert re.fullmatch(DOTTED_TOKEN, again["spanq_new_lease_token"])
    # A prefix whose last field looks like a lease end is kept whole too.
    [odd] = receive(sql, 1, "interval '1 minute'", "'w.1700000000000000'")
    [odd_renewed] = renew(sql, [odd["spanq_lease_token"]])
    assert re.fullmatch(r"w\.1700000000000000\.\d{16}\.k2~[0-9a-f]{32}", odd_renewed["spanq_new_lease_token"])
    # A stream's held count covers its own prefix, not the longer ones that start with it,
    # and finds a lease renewed since by the key its first token named.
    [plain] = receive(sql, 1, "interval '1 minute'", "'billing'")
    async with Store(database_url, min_size=1, max_size=1) as store:
        queue = await store.queue_get("tasks")
        assert queue is not None
        tokens = [row["spanq_lease_token"], plain["spanq_lease_token"], odd["spanq_lease_token"]]
        assert list(await store.leases_held(queue, "billing", tokens, None)) == [plain["spanq_lease_token"]]
        assert list(await store.leases_held(queue, "billing.worker-1", tokens, None)) == [
            again["spanq_new_lease_token"]]
        assert await store.leases_held(queue, "w", tokens, None) == {}
    # The current tokens ack; the superseded one does not.
    acked = await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=key("k1"), lease_token=again["spanq_new_lease_token"]),
        queue_pb2.AckMessage(key=key(plain["id"]), lease_token=plain["spanq_lease_token"])]))
    assert [r.acked for r in acked.results] == [True, True]


async def test_migration_0005_gives_existing_queues_the_right_to_left_renewal(stub, sql, tasks, database_url):
    # The renew function as migration 0004 left it: the prefix cut at its first '.'.
    current = sql.execute("SELECT pg_get_functiondef('spanq.renewlease_tasks'::regproc)").fetchone()[0]
    cut = re.sub(r"CASE WHEN NOT substr\(held\.spanq_old_token.*?ELSE regexp_replace\(held\.spanq_old_token, .*?, ''\) END",
                 "split_part(held.spanq_old_token, '.', 1)", current, flags=re.S)
    assert cut != current
    sql.execute(cut)
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 5")
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'one')")
    [row] = receive(sql, 1, "interval '1 minute'", "'billing.worker-1'")
    [mangled] = renew(sql, [row["spanq_lease_token"]])
    assert re.fullmatch(r"billing\.\d{16}\.k1~[0-9a-f]{32}", mangled["spanq_new_lease_token"])

    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [5]

    [row] = receive(sql, 1, "interval '1 minute'", "'billing.worker-1'", "now() + interval '2 hours'")
    [renewed] = renew(sql, [row["spanq_lease_token"]], "interval '10 seconds'", "now() + interval '2 hours'")
    assert re.fullmatch(DOTTED_TOKEN, renewed["spanq_new_lease_token"])


async def test_migration_0006_gives_existing_queues_spanq_prefixed_function_columns(stub, sql, tasks, database_url):
    # The functions as migration 0005 left them: their own columns named attempt and old_token.
    for function in ("receive_tasks", "renewlease_tasks"):
        current = sql.execute("SELECT pg_get_functiondef(%s::regproc)", [f"spanq.{function}"]).fetchone()[0]
        old = current.replace("spanq_attempt", "attempt").replace("spanq_old_token", "old_token")
        assert old != current
        sql.execute(old)
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 6")

    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [6]

    for function in ("receive_tasks", "renewlease_tasks"):
        text = sql.execute("SELECT pg_get_functiondef(%s::regproc)", [f"spanq.{function}"]).fetchone()[0]
        assert "spanq_attempt" in text and not re.search(r"\b(ready|held)\.(attempt|old_token)\b", text), text
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'one')")
    [row] = receive(sql, 1, "interval '1 minute'")
    [renewed] = renew(sql, [row["spanq_lease_token"]])
    assert renewed["spanq_old_lease_token"] == row["spanq_lease_token"] and renewed["spanq_new_lease_token"]


def ack_in_transaction(sql: psycopg.Connection, key: str) -> int:
    """The application's ack: its own write and the DELETE in one transaction, committed only
    when the DELETE removed exactly one row (Spanner's ASSERT_ROWS_MODIFIED 1)."""
    with sql.transaction():
        sql.execute("UPDATE orders SET receipts_sent = receipts_sent + 1 WHERE id = 1")
        deleted = sql.execute("DELETE FROM tasks WHERE id = %s", [key]).rowcount
        if deleted != 1:
            raise psycopg.Rollback()  # already acked: this work must not commit twice
    return deleted


async def test_ack_is_a_delete_whose_row_count_decides_the_commit(stub, sql, tasks):
    sql.execute("INSERT INTO orders (id) VALUES (1)")
    await send(stub, "tasks", text_message("k1", "send the receipt"))
    [message] = await receive_some(stub, "tasks", 1)

    assert ack_in_transaction(sql, "k1") == 1
    assert sql.execute("SELECT receipts_sent FROM orders").fetchall() == [(1,)]
    assert sql.execute("SELECT count(*) FROM tasks").fetchone() == (0,)
    # The second ack deletes 0 rows, so the application rolls back its write with it.
    assert ack_in_transaction(sql, "k1") == 0
    assert sql.execute("SELECT receipts_sent FROM orders").fetchall() == [(1,)]
    # gRPC sees the SQL ack: the message is gone.
    code, _, _ = await error_of(stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=message.key, lease_token=message.lease_token)])))
    assert code == grpc.StatusCode.OUT_OF_RANGE


async def test_send_and_ack_commit_or_roll_back_with_other_writes(stub, sql, tasks, database_url):
    await send(stub, "tasks", text_message("old", "for order 0"))
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        # One transaction: an order, the send of its task, and the ack of another task.
        await conn.execute("INSERT INTO orders (id) VALUES (1)")
        await conn.execute("INSERT INTO tasks (id, payload) VALUES ('new', 'for order 1')")
        assert (await conn.execute("DELETE FROM tasks WHERE id = 'old'")).rowcount == 1
        # Until COMMIT receivers get neither 'new' (not visible) nor 'old' (being acked: locked).
        assert await receive_some(stub, "tasks", 1, timeout=0.5, lease_duration=duration(1)) == []
        await conn.commit()
    assert sql.execute("SELECT id FROM orders").fetchall() == [(1,)]
    assert sql.execute("SELECT id FROM tasks").fetchall() == [("new",)]
    # The committed INSERT is a send like any other: a gRPC receiver gets it.
    [got] = await receive_some(stub, "tasks", 1)
    assert plain(got.key) == ["new"] and plain(got.payload) == "for order 1"

    # The same shape rolled back: neither the order, nor the send, nor the ack happened.
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await conn.execute("INSERT INTO orders (id) VALUES (2)")
        await conn.execute("INSERT INTO tasks (id, payload) VALUES ('newer', 'for order 2')")
        assert (await conn.execute("DELETE FROM tasks WHERE id = 'new'")).rowcount == 1
        await conn.rollback()
    assert sql.execute("SELECT id FROM orders").fetchall() == [(1,)]
    assert sql.execute("SELECT id, spanq_lease_token FROM tasks").fetchall() == [("new", got.lease_token)]


async def test_readme_psql_session(server, database_url, sql):
    session = await replay("From psql", server.target, database_url)
    ran = "\n".join(session.ran)
    for what in ["/CreateQueue", "INSERT INTO emails", "spanq.receive_emails(", "spanq.renewlease_emails(",
                 "DELETE FROM emails", "COMMIT", "ROLLBACK"]:
        assert what in ran, f"the README's psql session no longer shows {what}"
    # The session ran against this database.
    assert sql.execute("SELECT id, receipts_sent FROM orders").fetchall() == [(1, 1)]
    assert sql.execute("SELECT count(*) FROM emails").fetchone() == (0,)


async def test_receive_reads_a_deep_queue_by_index_not_by_scanning_it(tasks, sql):
    # Planned without its arguments, the receive function once joined its batch to the
    # queue by hashing the whole table: a scan per batch, slower the deeper the queue.
    sql.execute("INSERT INTO tasks (id, payload) SELECT 'm' || g, 'x' FROM generate_series(1, 20000) AS g")
    sql.execute("ANALYZE tasks")
    with sql.transaction():
        for _ in range(3):
            assert len(receive(sql, 100)) == 100
        scans = sql.execute("SELECT pg_stat_get_xact_numscans('tasks'::regclass)").fetchone()
    assert scans is not None and scans[0] == 0
