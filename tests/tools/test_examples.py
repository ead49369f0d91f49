"""The examples under examples/, run against a real server and PostgreSQL: each test drives an example's
functions and asserts the outcomes in the database, then runs the script itself as a subprocess (the way
a reader would) and checks what it printed. Also: docs/sdk.md is what tools/gen_sdk_reference.py writes."""

import asyncio
import contextlib
import dataclasses
import importlib.util
import os
import pathlib
import re
import signal
import subprocess
import sys
from datetime import timedelta
from types import ModuleType, SimpleNamespace

import psycopg
import pytest

import spanq
import spanq.aio
from spanq_server.server import start

from ..conftest import ROOT
from ..helpers import until

EXAMPLES = ROOT / "examples"


def load(name: str, folder: pathlib.Path = EXAMPLES) -> ModuleType:
    """Imports examples/<name>.py (or another folder's) as a module."""
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{name}", folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


async def run_script(name: str, *args: str, timeout: float = 60) -> str:
    """Runs ``python examples/<name>.py ARGS`` to the end; returns its output (it must exit 0)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / f"{name}.py"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text = out.decode()
    assert process.returncode == 0, f"examples/{name}.py exited with {process.returncode}:\n{text}"
    return text


# -- invitations ----------------------------------------------------------------------------------------


async def test_invitations_a_retry_repeats_the_intent_and_never_duplicates_the_member(server, database_url, sql):
    inv = load("invitations")
    connect = lambda: psycopg.AsyncConnection.connect(database_url, autocommit=True)  # noqa: E731
    async with spanq.aio.Client(server.target) as client, await connect() as conn:
        await inv.setup(client, conn)
        provider = inv.FlakyProvider(failures=1)
        async with inv.EmailWorker(client, database_url, provider):
            # The first attempt creates the member and queues its e-mail; the provider fails it.
            first = await inv.invite(conn, "acme", "Alice@Example.com")
            assert first.created and first.email_queued and first.delivery == "pending"
            failed = await inv.wait_for_delivery(conn, first.member_id)
            assert failed.state == "failed" and "503" in failed.last_error
            assert provider.calls == [("alice@example.com", f"invite-{first.member_id}-1")]

            # The retry, typed differently: the same member, the provider called a second time, and sent.
            retry = await inv.invite(conn, "acme", "  ALICE@example.COM ")
            assert retry == inv.Invitation(first.member_id, created=False, email_queued=True, delivery="pending")
            sent = await inv.wait_for_delivery(conn, first.member_id)
            assert sent == inv.Delivery("sent", sends=2, provider_calls=2, last_error=None)
            assert provider.calls[1] == ("alice@example.com", f"invite-{first.member_id}-2")
            assert provider.accepted == {f"invite-{first.member_id}-2": "alice@example.com"}

            # Once sent, a further repeat changes nothing and sends nothing.
            again = await inv.invite(conn, "acme", "alice@EXAMPLE.com")
            assert again == inv.Invitation(first.member_id, created=False, email_queued=False, delivery="sent")

            # Concurrent first attempts, each on its own connection: one member, one e-mail.
            variants = ["Bob@Example.com", " bob@example.com", "BOB@EXAMPLE.COM\t", "bob@Example.Com "]
            connections = [await connect() for _ in variants]
            try:
                results = await asyncio.gather(*(inv.invite(c, "acme", v) for c, v in zip(connections, variants)))
            finally:
                for c in connections:
                    await c.close()
            bob = results[0].member_id
            assert {r.member_id for r in results} == {bob} != {first.member_id}
            assert sum(r.created for r in results) == 1 and sum(r.email_queued for r in results) == 1
            assert (await inv.wait_for_delivery(conn, bob)).state == "sent"
            assert [to for to, _ in provider.calls].count("bob@example.com") == 1

            # The same address in another workspace is another member.
            other = await inv.invite(conn, "globex", "alice@example.com")
            assert other.created and other.member_id not in (first.member_id, bob)
            assert (await inv.wait_for_delivery(conn, other.member_id)).state == "sent"

        assert sql.execute("SELECT workspace, email, entered_as FROM members ORDER BY id").fetchall() == [
            ("acme", "alice@example.com", "Alice@Example.com"),
            ("acme", "bob@example.com", variants[[r.created for r in results].index(True)]),
            ("globex", "alice@example.com", "alice@example.com"),
        ]
        assert sql.execute("SELECT member_id, state, sends, provider_calls FROM invite_deliveries ORDER BY 1").fetchall() \
            == [(first.member_id, "sent", 2, 2), (bob, "sent", 1, 1), (other.member_id, "sent", 1, 1)]
        assert sql.execute(f"SELECT count(*) FROM {inv.QUEUE}").fetchone()[0] == 0  # every e-mail message acked
        # It is the unique constraint that holds the line, whatever the application does.
        with psycopg.connect(database_url, autocommit=True) as raw:
            try:
                raw.execute("INSERT INTO members (workspace, email, entered_as) VALUES ('acme', 'bob@example.com', 'x')")
                raise AssertionError("a second member with the same business key was stored")
            except psycopg.errors.UniqueViolation:
                pass

    out = await run_script("invitations", "--target", server.target, "--database-url", database_url)
    lines = out.splitlines()
    assert any(line.startswith("invite 'Alice@Example.com'") and "created=True" in line for line in lines), out
    assert sum(line.startswith("  worker: provider call") for line in lines) == 3, out  # alice twice (failed, sent), bob once
    assert any(line.startswith("retry") and "created=False, e-mail queued=True" in line for line in lines), out
    assert "4 concurrent first invites of bob" in out and "1 created, 1 e-mail queued" in out, out
    assert out.count("delivery: sent") == 2 and "delivery: failed" in out, out
    assert re.fullmatch(r"members of acme-\w+: 2; provider calls: 3; e-mails accepted by the provider: 2", lines[-1]), out


# -- long-running work ----------------------------------------------------------------------------------


async def test_long_running_jobs_are_never_redelivered_while_they_run_either_way(server, sql):
    lr = load("long_running")
    seconds = 2.25 * 2  # two and a quarter leases
    async with spanq.aio.Client(server.target) as client:
        await lr.setup(client)
        quiet = lambda line: None  # noqa: E731
        leased, by_hand, followed = await asyncio.gather(
            lr.run_with_subscriber(client, seconds, log=quiet),
            lr.run_with_manual_renewal(client, seconds, log=quiet),
            lr.run_with_follow_ups(client, seconds, check_every=0.5, log=quiet),
        )

    # Way 1: one delivery, held for several leases, its lease renewed all along; no competitor got it.
    for run in (leased, by_hand):
        assert run.deliveries == [1] and run.stolen == 0, run
        assert run.seconds >= seconds >= 2 * lr.LEASE
        assert len(run.lease_tokens) >= 3, run  # renewed at least twice (each renewal supersedes the token)

    # Way 2: a start and a chain of checks, each delivered once, each follow-up only after its delay.
    steps = followed.steps
    assert followed.deliveries == [1] * len(steps)
    assert [s.phase for s in steps] == ["start"] + ["check"] * (len(steps) - 1)
    assert 5 <= len(steps) <= 11, steps  # 4.5 s of checks 0.5 s apart
    for s in steps[1:]:
        assert s.scheduled_after >= s.delay == 0.5, s  # measured from before the commit that sent it
        assert abs(s.scheduled - 0.5) < 0.05, s  # deliver_time - enqueue_time on the server
    assert all(s.held < lr.LEASE / 2 for s in steps), steps  # no step needed its lease for long
    assert followed.seconds >= seconds
    for queue in (lr.RENDERS, lr.REPORTS, lr.EXPORTS):  # everything acked, nothing left behind
        assert sql.execute(f"SELECT count(*) FROM {queue}").fetchone()[0] == 0

    out = await run_script("long_running", "--target", server.target, "--job-seconds", "4.5")
    lines = out.splitlines()
    assert len(lines) == 4 and lines.pop(0) == "three jobs of 4.5s each, with a 2s lease, side by side:", out
    assert lines[0].startswith("1a. subscriber:") and "deliveries [1];" in lines[0] and lines[0].endswith(
        "the competitor got 0"), out
    assert lines[1].startswith("1b. renew by hand:") and "deliveries [1];" in lines[1] and lines[1].endswith(
        "the competitor got 0"), out
    assert lines[2].startswith("2.  ack + follow-up:") and re.search(r"deliveries \[1(, 1)+\]", lines[2]), out


# -- exactly once -----------------------------------------------------------------------------------------

FAULTS = "unknown_commit_after=0.3,unknown_commit_before=0.3"


@pytest.fixture
async def faulty_server(server_config, clock):
    """A server that answers 30% of commits UNKNOWN_COMMIT after committing and 30% before."""
    running = await start(dataclasses.replace(server_config, inject_faults=FAULTS), clock=clock)
    yield running
    await running.stop(0)


async def test_exactly_once_with_unknown_commits_and_a_worker_killed_mid_run(faulty_server, database_url, sql):
    eo = load("exactly_once")
    n = 240
    target = faulty_server.target

    def send() -> dict[str, int]:
        with spanq.Client(target) as client, psycopg.connect(database_url, autocommit=True) as conn:
            eo.setup(client, conn)
            # 48 sends of 5: enough draws that both faults are all but sure to be injected (with 10 sends of
            # 25, one of the two stayed at 0 about one run in twenty).
            return eo.send_payments(client, n, batch=5)

    expected = await asyncio.to_thread(send)
    # Through injected unknown commits, each payment was stored once (a blind resend of a payment's key would
    # have failed with AlreadyExists, and of a generated key stored it twice).
    assert sql.execute(f"SELECT count(*) FROM {eo.QUEUE}").fetchone()[0] == n
    injected = faulty_server.mutator.faults.injected
    assert injected["unknown_commit_after"] > 0 and injected["unknown_commit_before"] > 0, injected

    first = await asyncio.create_subprocess_exec(*eo.worker_command(target, database_url),
                                                 stdout=asyncio.subprocess.DEVNULL)
    try:
        await until(lambda: eo.applied_count(sql) >= n // 3, "the first worker to apply a third", 30, 0.01)
        held = eo.kill_while_holding(first.pid, sql)
        await first.wait()
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    assert first.returncode == -signal.SIGKILL
    midway = eo.ledger(sql)
    assert 0 < len(midway.applied) < n and held > 0, (len(midway.applied), held)  # killed mid-run, holding work
    assert midway.consistent(n)  # every payment applied once or still queued: nothing half-done

    second = await asyncio.create_subprocess_exec(*eo.worker_command(target, database_url),
                                                  stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(second.communicate(), 60)
    finally:
        if second.returncode is None:
            second.kill()
            await second.wait()
    assert second.returncode == 0, out.decode()
    assert re.search(rb"applied \d+ payments .* the queue is empty", out), out.decode()

    final = eo.ledger(sql)
    assert final.exactly_once(n) and final.balances == expected, final
    assert sorted(final.applied) == list(range(1, n + 1)) and set(final.applied.values()) == {1}
    assert final.redelivered >= 1  # the killed worker's messages came back, and were applied once
    assert set(final.workers) == {first.pid, second.pid}
    assert final.workers[first.pid] >= len(midway.applied)  # (a COMMIT sent just before the kill may land after)


async def test_exactly_once_script(faulty_server, database_url):
    out = await run_script("exactly_once", "--target", faulty_server.target, "--database-url", database_url,
                           "--payments", "150")
    assert "sent 150 payments to 4 accounts; the queue holds 150 messages" in out, out
    assert re.search(r"killed worker \d+ with SIGKILL after \d+ payments were applied, while it held [1-9]", out), out
    assert "right after the kill: consistent" in out, out
    assert out.rstrip().endswith("every payment applied exactly once"), out
    assert "150 applications of 150 payments, 150 distinct" in out, out


@contextlib.asynccontextmanager
async def gated_sql_acker(server_config, clock, database_url, keys: range, max_messages: int):
    """A server that polls only every 30 s, an INT64-keyed queue "q", and a subscriber whose callback notes
    each message's key, waits for that key's gate, then acks the message in SQL (spanq.sql.ack)."""
    running = await start(dataclasses.replace(server_config, poll_interval=timedelta(seconds=30)), clock=clock)
    try:
        async with spanq.aio.Client(running.target) as client, \
                await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await client.create_queue("q", key_columns=[("id", "INT64")], payload_type="STRING")
            gates = {i: asyncio.Event() for i in keys}
            delivered: list[int] = []
            lock = asyncio.Lock()

            async def handle(message: spanq.Message) -> None:
                delivered.append(message.key[0])
                await gates[message.key[0]].wait()
                async with lock, conn.transaction():
                    await spanq.sql.ack(conn, "q", message)

            subscription = client.subscribe("q", handle, flow_control=spanq.FlowControl(max_messages=max_messages))
            async with subscription:
                yield SimpleNamespace(client=client, subscription=subscription, gates=gates, delivered=delivered)
    finally:
        await running.stop(0)


async def test_a_subscriber_acking_in_sql_is_not_stalled_until_the_servers_poll(server_config, clock, database_url, sql,
                                                                                 waiting):
    """The exactly-once consumer's acks (spanq.sql.ack) bypass the server, so a Receive stream that used up its
    max_outstanding is not woken by them; the subscriber must reopen it rather than wait for the server's poll
    (here 30 s). Found by the exactly-once example: its second worker drained the queue 16 at a time, 5 s apart."""
    async with gated_sql_acker(server_config, clock, database_url, range(1, 5), max_messages=2) as w:
        await w.client.send_many("q", [spanq.OutgoingMessage("m", 1), spanq.OutgoingMessage("m", 2)])
        await until(lambda: w.delivered == [1, 2], "1 and 2", 10, 0.01)  # in hand: 2 of 2, paused
        waiting.clear()
        w.gates[1].set()  # resumes: a new stream with room for one
        await until(lambda: w.subscription.in_hand == 1, "1 acked", 10, 0.01)
        await waiting.wait(match=lambda v: v.queue == "q" and not v.full, what="the new stream to wait")
        w.gates[2].set()
        await until(lambda: w.subscription.in_hand == 0, "2 acked", 10, 0.01)
        await w.client.send("q", "m", key=3)  # fills the new stream's window
        await until(lambda: w.delivered == [1, 2, 3], "3", 10, 0.01)
        w.gates[3].set()  # acked in SQL: the server does not know the stream has room again
        await until(lambda: w.subscription.in_hand == 0, "3 acked", 10, 0.01)
        await w.client.send("q", "m", key=4)
        await until(lambda: w.delivered == [1, 2, 3, 4], "4, long before the server's 30 s poll", 5, 0.01)
        w.gates[4].set()
        await until(lambda: w.subscription.in_hand == 0, "4 acked", 10, 0.01)
    assert sql.execute("SELECT count(*) FROM q").fetchone()[0] == 0


async def test_room_freed_by_an_earlier_streams_messages_reopens_a_saturated_stream(server_config, clock,
                                                                                    database_url, sql, monkeypatch):
    """A stream opened narrow (messages in hand) that used up its window gets no room on the server when the
    messages of an EARLIER stream are acked: the server counts each stream's own leases. The subscriber must
    reopen it wider, not wait for its own message (handled last) or for the narrow stream to end. Found by the
    exactly-once example, whose workers drained to nothing held every ~20 messages."""
    monkeypatch.setattr(spanq._subscriber, "NARROW_STREAM_DURATION", timedelta(seconds=60))
    async with gated_sql_acker(server_config, clock, database_url, range(1, 7), max_messages=4) as w:
        await w.client.send_many("q", [spanq.OutgoingMessage("m", i) for i in range(1, 5)])
        await until(lambda: sorted(w.delivered) == [1, 2, 3, 4], "1-4 on the first stream", 10, 0.01)
        w.gates[1].set()  # room for one: a narrow stream opens
        await until(lambda: w.subscription.in_hand == 3, "1 acked", 10, 0.01)
        await w.client.send("q", "m", key=5)
        await until(lambda: 5 in w.delivered, "5, which uses up the narrow stream's window", 10, 0.01)
        w.gates[2].set()  # acked in SQL, and from the first stream: no room for the narrow one
        await until(lambda: w.subscription.in_hand == 3, "2 acked", 10, 0.01)
        await w.client.send("q", "m", key=6)
        await until(lambda: 6 in w.delivered, "6, long before the narrow stream ends (60 s)", 5, 0.01)
        for gate in w.gates.values():
            gate.set()
        await until(lambda: w.subscription.in_hand == 0, "all acked", 10, 0.01)
    assert sql.execute("SELECT count(*) FROM q").fetchone()[0] == 0


# -- the API reference ----------------------------------------------------------------------------------------


def test_the_sdk_reference_in_docs_is_current_and_lists_every_public_name():
    gen = load("gen_sdk_reference", ROOT / "tools")
    current = gen.DOC.read_text()
    assert gen.updated(current) == current, (
        "docs/sdk.md is stale: run .venv/bin/python tools/gen_sdk_reference.py and commit the result")
    reference = current.partition(gen.MARKER)[2]
    names = gen.public_names()
    assert len(names) >= 38 and "spanq.sql.ack" in names and "spanq.aio.Client" in names
    for name in names:
        assert re.search(rf"^### [a-z ]*`{re.escape(name)}\b", reference, re.M), f"{name} is not in the reference"
    for method in ("send", "send_many", "ack", "renew_lease", "nack", "commit", "subscribe", "receive", "transaction"):
        assert reference.count(f"Client.{method}(") == 2, method  # spanq.Client's, and spanq.aio.Client's


def test_the_examples_type_check_against_the_sdk(tmp_path):
    """The SDK ships py.typed: code written against it, as the examples are, must pass mypy. (It did not
    for spanq.Client.subscribe, which functools.wraps had typed as taking an aio.Client first.)"""
    files = [str(p) for p in sorted(EXAMPLES.glob("*.py")) if p.name != "spanner_queue.py"]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "--no-error-summary", *files,
         str(ROOT / "tools" / "gen_sdk_reference.py")],
        env={**os.environ, "MYPYPATH": str(ROOT / "client")}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_sdk_passes_mypy_strict(tmp_path):
    """py.typed is a promise: the SDK itself type-checks under --strict (generated stubs excepted)."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path), "-p", "spanq"],
        cwd=ROOT, env={**os.environ, "MYPYPATH": str(ROOT / "client")}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
