"""The blocking client's unary calls run on the calling thread (grpcio's blocking stubs),
with the aio client's own logic and retry rule: no event-loop thread, the same replays."""

import asyncio
import dataclasses
import subprocess
import sys
import threading
from collections import Counter

import pytest

import spanq

FAST = spanq.Retry(initial_backoff=0.005, max_backoff=0.05, deadline=30)


def loop_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("spanq-client-")]


async def test_unary_calls_start_no_loop_thread_and_streams_start_it(server):
    # The server runs on this test's loop, so the blocking client is driven from other threads.
    def unary_calls() -> list[str]:
        with spanq.Client(server.target) as client:
            client.create_queue("direct", payload_type="STRING")
            keys = [client.send("direct", f"m{i}") for i in range(3)]
            client.send_many("direct", ["m3", "m4"])
            assert client.get_queue("direct").name == "direct"
            assert client.stats("direct").ready == 5
            assert len(client.peek("direct").messages) == 5
            assert client.ack("direct", *keys) == [True] * 3
            during = loop_threads()
            [message] = client.receive("direct", 1)  # a stream: on the loop thread
            started = loop_threads()
            assert client.ack("direct", message) == [True]
            return during + ["|"] + started

    seen = await asyncio.to_thread(unary_calls)
    assert seen[:seen.index("|")] == []
    assert len(seen[seen.index("|") + 1:]) == 1
    assert loop_threads() == []  # close() stopped it


async def test_a_blocking_call_from_the_clients_own_loop_is_refused(server):
    def run() -> None:
        with spanq.Client(server.target) as client:
            client.create_queue("own_loop", payload_type="STRING")
            client.send("own_loop", "x")
            [message] = client.receive("own_loop", 1)
            assert message.queue == "own_loop"

            async def on_loop() -> None:
                client.send("own_loop", "y")

            with pytest.raises(RuntimeError, match="own event loop"):
                client._thread.run(on_loop())

    await asyncio.to_thread(run)


def test_an_unclosed_blocking_client_lets_the_interpreter_exit():
    script = ("import spanq\nc = spanq.Client('127.0.0.1:1', connect_timeout=0.5)\n"
              "try:\n    c.get_queue('q')\nexcept spanq.Unavailable:\n    print('unavailable')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "unavailable", done.stderr


class TestUnderUnknownCommits:
    @pytest.fixture
    def server_config(self, server_config):
        return dataclasses.replace(server_config,
                                   inject_faults="unknown_commit_after=0.3,unknown_commit_before=0.3")

    async def test_blocking_sends_and_acks_replay_their_request_id_and_apply_once(self, server, sql):
        n = 400

        def run() -> None:
            with spanq.Client(server.target, retry=FAST) as client:
                # Generated keys: a blind retry stores twice. A 3 s lease: a batch leased under a lost
                # answer is never handed over, and waited out the default 10 s lease (one run in three).
                client.create_queue("faulty", payload_type="JSON", lease_duration=3)

                def sender(worker: int) -> None:
                    for start in range(worker * 10, n, 4 * 10):
                        client.send_many("faulty", [{"n": i} for i in range(start, start + 10)])

                threads = [threading.Thread(target=sender, args=(w,)) for w in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                stored = [row[0] for row in sql.execute("SELECT (payload->>'n')::int FROM faulty")]
                assert sorted(stored) == list(range(n))
                acked: Counter[int] = Counter()
                while sql.execute("SELECT count(*) FROM faulty").fetchone()[0]:
                    batch = client.receive("faulty", 50, timeout=1)
                    if batch:  # a replayed ack would be MessageGone; a replayed commit the same
                        if len(acked) % 2:
                            assert client.ack("faulty", *batch) == [True] * len(batch)
                        else:
                            with client.transaction() as tx:
                                tx.ack("faulty", *batch)
                            assert tx.result is not None and tx.result.results[0] == [True] * len(batch)
                        acked.update(m.payload["n"] for m in batch)
                assert sorted(acked) == list(range(n)) and max(acked.values()) == 1

        await asyncio.to_thread(run)
        injected = server.mutator.faults.injected
        # Both faults struck, several times (else the test proved nothing). Not many more can be
        # asked: concurrent sends share a commit (the Send group), so how many commits write varies
        # with the machine: 15-23 lost answers in eight runs on PostgreSQL 15, 8 once on the embedded
        # one under CI, where "> 10" failed.
        assert injected["unknown_commit_after"] >= 3 and injected["unknown_commit_before"] >= 3, injected


def test_a_blocking_call_reaches_a_server_that_came_back_on_the_same_port(database_url):
    """After its server went away, the blocking channel is IDLE until asked to connect: the next
    call must ask, and be answered by the server that came back (it waited out connect_timeout)."""
    from tests.spawned import free_port, spawn_server, wait_serving_sync

    port = free_port()
    target = f"127.0.0.1:{port}"
    server = spawn_server(database_url, port)
    try:
        wait_serving_sync(target)
        with spanq.Client(target, connect_timeout=5, retry=FAST) as client:
            client.create_queue("back", payload_type="STRING")
            server.kill()
            server.wait(10)
            server = spawn_server(database_url, port)
            wait_serving_sync(target)
            assert client.get_queue("back").name == "back"
            assert client.send("back", "after") is not None
    finally:
        server.kill()
        server.wait(10)
