"""Queue DDL against tables another open transaction holds: it waits at most
--ddl-lock-timeout, then fails ABORTED saying what to do, and nothing changes; while
it waits it holds no catalog lock (other queue DDL goes on) and sends to the queue
wait at most a slice (store.DDL_LOCK_SLICE) behind it."""

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta

import grpc
import psycopg
import pytest

import spanq
import spanq.aio

from spanq_proto.v1 import queue_pb2
from spanq_server.ground.config import Config
from spanq_server.store import Store
from spanq_server.store.database import connection_of

from ..helpers import create_queue, error_of, send, spanner_ddl, text_message, until

LOCK_TIMEOUT = 1.5
"""Seconds: the servers' --ddl-lock-timeout here."""
QUICK = 1.0
"""Seconds: what a call that waits on no lock takes at most, on a busy machine."""


@pytest.fixture
def server_config(server_config: Config) -> Config:
    return dataclasses.replace(server_config, ddl_lock_timeout=timedelta(seconds=LOCK_TIMEOUT))


@pytest.fixture
def holder(database_url: str) -> Iterator[psycopg.Connection]:
    """A psql-like session whose transaction the test leaves open."""
    with psycopg.connect(database_url) as conn:
        yield conn
        conn.rollback()


async def waiting_for_lock(sql: psycopg.Connection, table: str) -> None:
    """Until a session waits for a lock on the table (a bounded poll)."""
    await until(lambda: sql.execute("SELECT count(*) FROM pg_locks WHERE relation = to_regclass(%s) AND NOT granted",
                                    [f"public.{table}"]).fetchone()[0], f"a session to wait for a lock on {table}", 5,
                0.01)


async def test_drop_queue_behind_an_open_reader_fails_aborted_and_blocks_no_one(server, stub, channel, sql,
                                                                                 holder) -> None:
    pytest.importorskip("google.cloud.spanner")
    await create_queue(stub, "x", payload_type=queue_pb2.STRING)
    await send(stub, "x", text_message("kept", "x"))
    holder.execute("SELECT count(*) FROM x")  # a read-only transaction, left open: it holds x's table

    started = time.monotonic()
    drop = asyncio.ensure_future(stub.DropQueue(queue_pb2.DropQueueRequest(name="x")))
    await waiting_for_lock(sql, "x")
    # Meanwhile other queue DDL goes on (the drop holds no catalog lock), and so do sends to x.
    assert (await asyncio.wait_for(create_queue(stub, "y"), QUICK)).name == "y"
    await asyncio.wait_for(send(stub, "x", text_message("during", "x")), QUICK)
    code, text, info = await error_of(drop)
    waited = time.monotonic() - started
    assert code == grpc.StatusCode.ABORTED, text
    assert text.startswith(f"DropQueue of 'x' waited {LOCK_TIMEOUT:g}s for table 'x', which another open "
                           "transaction holds"), text
    assert "nothing changed" in text and "pg_stat_activity" in text and "--ddl-lock-timeout" in text, text
    assert info == {"reason": "ABORTED", "lock_wait": f"{LOCK_TIMEOUT:g}s"}
    assert LOCK_TIMEOUT <= waited < LOCK_TIMEOUT + 2, waited
    # Nothing changed: the queue, its messages and its functions are all there.
    assert (await stub.GetQueue(queue_pb2.GetQueueRequest(name="x"))).name == "x"
    assert sorted(r[0] for r in sql.execute("SELECT id FROM x")) == ["during", "kept"]

    # The SDK raises it as spanq.Aborted, at once: it does not retry it.
    async with spanq.aio.Client(server.target) as client:
        with pytest.raises(spanq.Aborted, match="waited 1.5s for table 'x'"):
            await client.drop_queue("x")

    # The Spanner front-end's DDL goes through the same catalog: the same answer.
    operation = await spanner_ddl(channel, "DROP QUEUE X")
    assert operation.error.code == grpc.StatusCode.ABORTED.value[0], operation.error
    assert "waited 1.5s for table 'x'" in operation.error.message

    holder.rollback()  # the reader ends: the drop goes through
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="x"))
    assert sql.execute("SELECT to_regclass('public.x')").fetchone() == (None,)


async def test_create_queue_behind_a_parent_tables_writer_fails_aborted(stub, sql, holder) -> None:
    sql.execute("CREATE TABLE users (id text PRIMARY KEY)")
    holder.execute("INSERT INTO users VALUES ('u1')")  # uncommitted: the child's foreign key must wait for it
    child = create_queue(stub, "inbox", payload_type=queue_pb2.STRING, parent_table="users",
                         key_columns=[queue_pb2.KeyColumn(name="id", type=queue_pb2.STRING)])
    creating = asyncio.ensure_future(child)
    await waiting_for_lock(sql, "users")
    assert (await asyncio.wait_for(create_queue(stub, "other"), QUICK)).name == "other"
    code, text, _ = await error_of(creating)
    assert code == grpc.StatusCode.ABORTED, text
    assert text.startswith(f"CreateQueue of 'inbox' waited {LOCK_TIMEOUT:g}s for table 'users'"), text
    assert sql.execute("SELECT name FROM spanq.queues").fetchall() == [("other",)]
    assert sql.execute("SELECT to_regclass('public.inbox')").fetchone() == (None,)
    holder.commit()
    created = await create_queue(stub, "inbox", payload_type=queue_pb2.STRING, parent_table="users",
                                 key_columns=[queue_pb2.KeyColumn(name="id", type=queue_pb2.STRING)])
    assert created.parent_table == "users"


async def test_the_locks_taken_first_are_held_to_the_end_of_the_ddl(database_url, sql) -> None:
    """Each lock attempt is a savepoint of the DDL's transaction, never a transaction of its
    own whose COMMIT would let the lock go before the DDL runs."""
    sql.execute("CREATE TABLE users (id text PRIMARY KEY)")
    async with Store(database_url, min_size=1, max_size=1) as store:
        async with store.transaction() as handle:
            conn = connection_of(handle)
            await store._ddl_locks(conn, "a test", [("users", "SHARE ROW EXCLUSIVE")], timedelta(seconds=1))
            held = sql.execute("SELECT locktype, mode FROM pg_locks WHERE pid = %s AND granted "
                               "AND (relation = 'public.users'::regclass OR locktype = 'advisory')",
                               [conn.info.backend_pid]).fetchall()
            assert sorted(held) == [("advisory", "ExclusiveLock"), ("relation", "ShareRowExclusiveLock")]
