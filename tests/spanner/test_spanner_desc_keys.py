"""DESC primary-key columns (``PRIMARY KEY (UserId, MessageId DESC)``) through Google's Python
client, against a real server and PostgreSQL: a table's rows come back in key order with each
column's direction (Read of all, of key ranges, which on a DESC column run from the greater value
to the smaller as keys.proto documents, with a limit; a Delete by range), its interleaved children
and indexes work, and a queue with a DESC key is created, listed, sent to, received, acked and
read by ``SELECT * FROM q`` in that order."""

import itertools
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import KeyRange, KeySet

from . import conftest
from .conftest import ddl_of, run

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = "desc-project", "desc-instance"
MESSAGES = """CREATE TABLE Messages (
  UserId INT64 NOT NULL,
  MessageId INT64 NOT NULL,
  Body STRING(MAX),
) PRIMARY KEY(UserId, MessageId DESC)"""
ATTACHMENTS = """CREATE TABLE Attachments (
  UserId INT64 NOT NULL,
  MessageId INT64 NOT NULL,
  Name STRING(MAX) NOT NULL,
) PRIMARY KEY(UserId, MessageId DESC, Name),
  INTERLEAVE IN PARENT Messages ON DELETE CASCADE"""
BY_BODY = "CREATE INDEX MessagesByBody ON Messages(Body DESC)"
INBOX = """CREATE QUEUE Inbox (
  UserId INT64 NOT NULL,
  MessageId STRING(36) NOT NULL,
  Payload STRING(MAX) NOT NULL
) PRIMARY KEY (UserId, MessageId DESC)"""
ROWS = [(u, m) for u in (1, 2) for m in (1, 2, 3)]
IN_KEY_ORDER = sorted(ROWS, key=lambda r: (r[0], -r[1]))


def make_database(database_id: str, ddl: list[str]) -> Any:
    return conftest.make_database(PROJECT, INSTANCE, database_id, ddl)


def in_range(row: tuple[int, int], start: list[int], start_closed: bool, end: list[int], end_closed: bool) -> bool:
    """Spanner's KeyRange on (UserId, MessageId DESC): the row's first len(bound) key values
    compared with the bound in the key's order (a DESC column's greater value first)."""
    def order(values: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(v if i == 0 else -v for i, v in enumerate(values))

    def compared(bound: list[int]) -> int:
        mine, theirs = order(row[:len(bound)]), order(tuple(bound))
        return (mine > theirs) - (mine < theirs)

    return ((not start or compared(start) >= (0 if start_closed else 1))
            and (not end or compared(end) <= (0 if end_closed else -1)))


async def test_a_desc_keyed_table_reads_in_key_order_and_its_ranges_run_greater_to_smaller(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "tables", [MESSAGES, ATTACHMENTS, BY_BODY])

    def scenario() -> dict[str, Any]:
        with database.batch() as batch:  # inserted out of order
            batch.insert("Messages", ("UserId", "MessageId", "Body"), [(u, m, f"{u}.{m}") for u, m in reversed(ROWS)])
            batch.insert("Attachments", ("UserId", "MessageId", "Name"), [(1, 2, "a"), (1, 3, "b"), (1, 3, "a")])
        out: dict[str, Any] = {}
        with database.snapshot(multi_use=True) as snapshot:
            def read(*ranges: KeyRange, table: str = "Messages", **kw: Any) -> list[tuple[int, ...]]:
                key_set = KeySet(ranges=list(ranges)) if ranges else KeySet(all_=True)
                columns = ("UserId", "MessageId", "Name") if table == "Attachments" else ("UserId", "MessageId")
                return [tuple(r) for r in snapshot.read(table, columns, key_set, **kw)]

            out["all"] = read()
            out["limit"] = read(limit=4)
            out["closed"] = read(KeyRange(start_closed=[1, 3], end_closed=[1, 2]))
            out["open"] = read(KeyRange(start_open=[1, 3], end_open=[1, 1]))
            out["backwards"] = read(KeyRange(start_closed=[1, 1], end_closed=[1, 3]))  # ascending bounds: nothing
            out["prefix"] = read(KeyRange(start_closed=[2], end_closed=[2]))
            out["prefix_open"] = read(KeyRange(start_open=[1], end_open=[2, 1]))
            out["two"] = read(KeyRange(start_closed=[2, 2], end_closed=[2]), KeyRange(start_closed=[1], end_open=[1, 2]))
            out["children"] = read(table="Attachments")
            out["index"] = [tuple(r) for r in snapshot.read("Messages", ("Body",), KeySet(all_=True),
                                                            index="MessagesByBody", limit=2)]
            # Every range of bounds of one and two key values, open and closed, against keys.proto's rule.
            bounds = [[], [1], [2], [1, 1], [1, 2], [1, 3], [2, 2], [2, 0]]
            out["checked"] = 0
            for (start, sc), (end, ec) in itertools.product(itertools.product(bounds, (True, False)), repeat=2):
                if not start and not end:
                    continue  # the client asks for a bound
                kind = {"start_closed" if sc else "start_open": start, "end_closed" if ec else "end_open": end}
                found = read(KeyRange(**kind))
                wanted = [r for r in IN_KEY_ORDER if in_range(r, start, sc, end, ec)]
                assert found == wanted, kind
                out["checked"] += 1
        with database.batch() as batch:  # a Delete by range, in the same order
            batch.delete("Messages", KeySet(ranges=[KeyRange(start_closed=[2, 3], end_open=[2, 1])]))
        with database.snapshot() as snapshot:
            out["after_delete"] = [tuple(r) for r in snapshot.read("Messages", ("UserId", "MessageId"),
                                                                   KeySet(all_=True))]
        # In a read-write transaction (the read locks what it reads) the order is the same.
        out["in_transaction"] = database.run_in_transaction(lambda t: [tuple(r) for r in t.read(
            "Messages", ("UserId", "MessageId"), KeySet(ranges=[KeyRange(start_closed=[1], end_closed=[1])]))])
        return out

    out = await run(scenario)
    assert out["all"] == IN_KEY_ORDER == [(1, 3), (1, 2), (1, 1), (2, 3), (2, 2), (2, 1)]
    assert out["limit"] == IN_KEY_ORDER[:4]
    assert out["closed"] == [(1, 3), (1, 2)] and out["open"] == [(1, 2)] and out["backwards"] == []
    assert out["prefix"] == [(2, 3), (2, 2), (2, 1)] and out["prefix_open"] == [(2, 3), (2, 2)]
    assert out["two"] == [(1, 3), (2, 2), (2, 1)]
    assert out["children"] == [(1, 3, "a"), (1, 3, "b"), (1, 2, "a")]
    assert out["index"] == [("2.3",), ("2.2",)]
    assert out["checked"] == 252
    assert out["after_delete"] == [(1, 3), (1, 2), (1, 1), (2, 1)]
    assert out["in_transaction"] == [(1, 3), (1, 2), (1, 1)]
    # PostgreSQL: the primary key is as it was; the mixed key's order is a unique index of its own.
    (table,) = sql.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'd%\\_messages'").fetchone()
    indexes = dict(sql.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", (table,)).fetchall())
    assert indexes[f"{table}_pkey"].endswith("(userid, messageid)")
    assert indexes[f"{table}$key"].startswith("CREATE UNIQUE INDEX") and indexes[f"{table}$key"].endswith(
        "(userid, messageid DESC)")


async def test_get_database_ddl_lists_desc_keys_as_declared_and_reads_them_back(spanner_env) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "listed", [MESSAGES, ATTACHMENTS, BY_BODY, INBOX])
    ddl = await run(ddl_of, database)
    assert ddl[0] == MESSAGES and ddl[1] == ATTACHMENTS and ddl[2] == BY_BODY
    assert ddl[3] == INBOX
    # IF NOT EXISTS of each listed statement is a no-op; the list is unchanged.
    await run(lambda: database.update_ddl([s.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS").replace(
        "CREATE QUEUE", "CREATE QUEUE IF NOT EXISTS") for s in (ddl[0], ddl[1], ddl[3])]).result(timeout=30))
    assert await run(ddl_of, database) == ddl

    def refused(statement: str) -> str:
        with pytest.raises(exceptions.GoogleAPICallError) as failed:
            database.update_ddl([statement]).result(timeout=30)
        return f"{type(failed.value).__name__}: {failed.value.message}"

    # A child of a DESC-keyed parent starts its key with the parent's in the parent's order.
    child = await run(refused, "CREATE TABLE Wrong (UserId INT64 NOT NULL, MessageId INT64 NOT NULL) "
                               "PRIMARY KEY (UserId, MessageId), INTERLEAVE IN PARENT Messages")
    assert "FailedPrecondition" in child and "(UserId INT64, MessageId INT64 DESC)" in child
    queue = await run(refused, "CREATE QUEUE WrongQ (UserId INT64 NOT NULL, MessageId INT64 NOT NULL, "
                               "Payload BYTES(MAX) NOT NULL) PRIMARY KEY (UserId, MessageId), "
                               "INTERLEAVE IN PARENT Messages")
    assert "FailedPrecondition" in queue and "MessageId DESC" in queue
    assert await run(ddl_of, database) == ddl  # nothing of either was made


async def test_a_desc_keyed_queue_is_sent_to_received_acked_and_selected_in_key_order(spanner_env) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "queue", [INBOX, MESSAGES])
    keys = [(1, "a"), (2, "a"), (1, "c"), (2, "b"), (1, "b")]

    def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        with database.batch() as batch:
            for user, message in keys:
                batch.send(queue="Inbox", key=[user, message], payload=f"{user}{message}")
        with database.snapshot(multi_use=True) as snapshot:
            results = snapshot.execute_sql("SELECT * FROM Inbox")
            rows = list(results)
            out["fields"] = [f.name for f in results.fields]
            out["star"] = [tuple(r[:3]) for r in rows]
            out["limit"] = [tuple(r) for r in snapshot.execute_sql("SELECT UserId, MessageId FROM Inbox LIMIT 2")]
            out["by_message"] = [r[1] for r in snapshot.execute_sql(
                "SELECT UserId, MessageId FROM Inbox WHERE UserId = 2 ORDER BY MessageId")]
            out["read"] = [tuple(r) for r in snapshot.read("Inbox", ("UserId", "MessageId"), KeySet(all_=True))]
        with database.snapshot() as snapshot:
            received = []
            for row in snapshot.execute_sql("SELECT UserId, MessageId FROM RECEIVE_Inbox(max_duration => '1m')"):
                received.append((row[0], row[1]))
                if len(received) == len(keys):
                    break  # RECEIVE reads on until max_duration
        out["received"] = sorted(received)
        with database.batch() as batch:
            for user, message in received:
                batch.ack(queue="Inbox", key=[user, message])
        with database.snapshot() as snapshot:
            out["left"] = list(snapshot.execute_sql("SELECT * FROM Inbox"))
        return out

    out = await run(scenario)
    assert out["fields"] == ["UserId", "MessageId", "Payload", "DeliverTime"]
    assert out["star"] == [(1, "c", "1c"), (1, "b", "1b"), (1, "a", "1a"), (2, "b", "2b"), (2, "a", "2a")]
    assert out["limit"] == [(1, "c"), (1, "b")]
    assert out["by_message"] == ["a", "b"]  # an ORDER BY written is as written
    assert out["read"] == [(1, "c"), (1, "b"), (1, "a"), (2, "b"), (2, "a")]
    assert out["received"] == sorted(keys)
    assert out["left"] == []
