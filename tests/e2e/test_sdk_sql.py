"""spanq.sql: sends and acks inside the application's own psycopg transaction
commit and roll back with its other writes; an ack that deletes nothing
raises MessageGone and leaves the transaction unable to commit."""

import asyncio
import logging

import psycopg
import pytest

import spanq
import spanq.aio

from ..helpers import until


async def test_sql_send_commits_and_rolls_back_with_the_applications_writes(server, database_url, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("emails", payload_type="JSON")  # no key columns: spanq.sql makes a UUID key
        sql.execute("CREATE TABLE members (email text PRIMARY KEY)")
        with psycopg.connect(database_url, autocommit=True) as conn:
            with conn.transaction():
                conn.execute("INSERT INTO members VALUES ('a@example.com')")
                key = spanq.sql.send(conn, "emails", None, {"to": "a@example.com"})
            assert isinstance(key[0], str) and len(key[0]) == 36
            with pytest.raises(RuntimeError), conn.transaction():
                conn.execute("INSERT INTO members VALUES ('b@example.com')")
                spanq.sql.send(conn, "emails", None, {"to": "b@example.com"})
                raise RuntimeError("the application fails after sending")

        [message] = await client.receive("emails", 5)
        assert message.key == key and message.payload == {"to": "a@example.com"}
        assert sql.execute("SELECT email FROM members").fetchall() == [("a@example.com",)]
        assert await client.receive("emails", timeout=0.2) == []


async def test_sql_ack_commits_with_the_applications_writes_and_a_gone_message_aborts(server, database_url, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("work", key_columns=[("tenant", "INT64"), ("id", "STRING")], payload_type="STRING")
        await client.send_many("work", [spanq.OutgoingMessage(f"job {i}", (1, f"j{i}")) for i in range(3)])
        first, second, third = sorted(await client.receive("work", 3), key=lambda m: m.key)
        sql.execute("CREATE TABLE done (id text PRIMARY KEY)")

        with psycopg.connect(database_url, autocommit=True) as conn:
            with conn.transaction():
                conn.execute("INSERT INTO done VALUES ('j0')")
                assert spanq.sql.ack(conn, "work", first) is True
            assert sql.execute("SELECT count(*) FROM work WHERE id = 'j0'").fetchone()[0] == 0

            # Acking it again deletes nothing: MessageGone, and the whole transaction rolls back.
            with pytest.raises(spanq.MessageGone), conn.transaction():
                conn.execute("INSERT INTO done VALUES ('again')")
                spanq.sql.ack(conn, "work", {"tenant": 1, "id": "j0"})

            # Even a caller that swallows the error cannot commit: the transaction is aborted.
            conn.autocommit = False
            conn.execute("INSERT INTO done VALUES ('swallowed')")
            with pytest.raises(spanq.MessageGone):
                spanq.sql.ack(conn, "work", (1, "j0"))
            conn.commit()
            conn.autocommit = True
            assert spanq.sql.ack(conn, "work", (1, "j0"), ignore_not_found=True) is False

            # With a lease token, only that lease's holder may ack.
            with pytest.raises(spanq.LeaseLost), conn.transaction():
                spanq.sql.ack(conn, "work", second, lease_token="someone-else.0")
            with pytest.raises(spanq.NotFound):
                spanq.sql.ack(conn, "nowhere", ("x",))
            with pytest.raises(spanq.InvalidArgument):
                spanq.sql.ack(conn, "work", ("j1",))  # one value for a two-column key
            with pytest.raises(spanq.AlreadyExists), conn.transaction():
                spanq.sql.send(conn, "work", (1, "j2"), "a duplicate key")

        assert sql.execute("SELECT id FROM done").fetchall() == [("j0",)]

        # The same on an asyncio connection.
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            async with aconn.transaction():
                await aconn.execute("INSERT INTO done VALUES ('j1')")
                assert await spanq.sql.ack(aconn, "work", second, lease_token=second.lease_token) is True
                await spanq.sql.send(aconn, "work", {"tenant": 2, "id": "next"}, "follow-up")
            with pytest.raises(spanq.MessageGone):
                async with aconn.transaction():
                    await aconn.execute("INSERT INTO done VALUES ('never')")
                    await spanq.sql.ack(aconn, "work", second)
        assert sorted(r[0] for r in sql.execute("SELECT id FROM done")) == ["j0", "j1"]
        assert sorted(sql.execute("SELECT tenant, id FROM work").fetchall()) == [(1, "j2"), (2, "next")]
        await client.ack("work", third)


async def test_exactly_once_consumer_acks_in_its_own_transaction(server, database_url, sql, caplog):
    caplog.set_level(logging.WARNING, logger="spanq")
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("payments", key_columns=[("id", "INT64")], payload_type="JSON")
        sql.execute("CREATE TABLE balances (account text PRIMARY KEY, total bigint NOT NULL)")
        sql.execute("INSERT INTO balances VALUES ('a', 0), ('b', 0)")
        await client.send_many("payments", [
            spanq.OutgoingMessage({"account": "ab"[i % 2], "amount": i}, i) for i in range(40)])

        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            lock = asyncio.Lock()  # one connection, one transaction at a time
            applied: list[int] = []

            async def apply(message: spanq.Message) -> None:
                async with lock, conn.transaction():
                    await conn.execute("UPDATE balances SET total = total + %s WHERE account = %s",
                                       (message.payload["amount"], message.payload["account"]))
                    await spanq.sql.ack(conn, "payments", message)
                applied.append(message.key[0])

            async with client.subscribe("payments", apply):
                await until(lambda: len(applied) >= 40, "every payment applied", 30)
        totals = dict(sql.execute("SELECT account, total FROM balances").fetchall())
        assert totals == {"a": sum(range(0, 40, 2)), "b": sum(range(1, 40, 2))}
        assert sorted(applied) == list(range(40))
        assert sql.execute("SELECT count(*) FROM payments").fetchone()[0] == 0
        assert not caplog.records  # the subscriber let them go quietly: no lost leases, no failed acks
