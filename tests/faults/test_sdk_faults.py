"""The SDK's retries under injected unknown commits: every send, ack, renewal
and commit replays its one request_id until it learns the outcome, so with
30% of commits answered UNKNOWN_COMMIT after committing and 30% before,
thousands of messages are each stored once and acked once."""

import asyncio
import dataclasses
from collections import Counter
from datetime import timedelta

import pytest

import spanq
import spanq.aio

from ..helpers import until

N = 3000
FAST = spanq.Retry(initial_backoff=0.005, max_backoff=0.05, deadline=30)
LEASE = timedelta(seconds=3)
"""The subscriber's lease. An ack group that frees a waiting stream's room leases its next batch in
the same commit; when that commit's answer is lost, the batch is never handed over and waits out
its lease (ack_lease.py): 3 s rather than the default 10 s. Acks take milliseconds, and the
subscriber's leaser renews (through the same faults), so no lease lapses under a callback."""
POLL = timedelta(seconds=0.5)
"""The server's poll interval. An ack whose answer was lost frees room the server is not told of:
a stream at max_outstanding learns of it at its next recount (the poll), 5 s by default."""


@pytest.fixture
def server_config(server_config):
    return dataclasses.replace(server_config, inject_faults="unknown_commit_after=0.3,unknown_commit_before=0.3",
                               poll_interval=POLL)


async def test_unknown_commits_store_each_message_once_and_ack_it_once(server, sql):
    async with spanq.aio.Client(server.target, retry=FAST) as client:
        # No key columns: every send gets a fresh UUID key, so a blind re-execution would store a second row.
        await client.create_queue("inbox", payload_type="JSON")
        await client.create_queue("archive", payload_type="JSON")

        async def sender(worker: int) -> None:
            for start in range(worker * 10, N, 8 * 10):
                await client.send_many("inbox", [{"n": n} for n in range(start, start + 10)])

        await asyncio.gather(*(sender(w) for w in range(8)))
        stored = [row[0] for row in sql.execute("SELECT (payload->>'n')::int FROM inbox")]
        assert len(stored) == N and set(stored) == set(range(N))

        # Half: received, then acked and archived in one Commit per batch (a replayed ack would otherwise be
        # MessageGone, a replayed send a second archive row).
        async def mover() -> None:
            while sql.execute("SELECT count(*) FROM archive").fetchone()[0] < N // 2:
                batch = await client.receive("inbox", 50, timeout=1)
                async with client.transaction() as tx:
                    tx.ack("inbox", *batch).send_many("archive", [m.payload for m in batch])
                assert tx.result is not None and tx.result.results[0] == [True] * len(batch)

        await asyncio.gather(*(mover() for _ in range(3)))
        moved = [row[0] for row in sql.execute("SELECT (payload->>'n')::int FROM archive")]
        assert len(moved) == len(set(moved)) and len(moved) >= N // 2

        # The rest: a subscriber whose acks (and any renewals) go through the same faults.
        seen: Counter[int] = Counter()

        async def handle(message: spanq.Message) -> None:
            seen[message.payload["n"]] += 1

        rest = N - len(moved)
        async with client.subscribe("inbox", handle, flow_control=spanq.FlowControl(max_messages=200),
                                    lease_duration=LEASE):
            await until(lambda: not sql.execute("SELECT count(*) FROM inbox").fetchone()[0], "every message settled",
                        60, 0.05)
        assert len(seen) == rest and set(seen).isdisjoint(moved) and max(seen.values()) == 1
        assert sorted([*moved, *seen]) == list(range(N))

    injected = server.mutator.faults.injected
    assert injected["unknown_commit_after"] > 100 and injected["unknown_commit_before"] > 100, injected


async def test_published_batches_replay_their_request_id_and_are_stored_once(server, sql):
    async with spanq.aio.Client(server.target, retry=FAST,
                                batch_settings=spanq.BatchSettings(max_messages=20, max_latency=0.001)) as client:
        await client.create_queue("published", payload_type="JSON")  # UUID keys: a re-execution would show
        futures = [await client.publish("published", {"n": n}) for n in range(1000)]
        keys = [key for (key,) in await asyncio.gather(*futures)]
    rows = dict(sql.execute("SELECT id, (payload->>'n')::int FROM published").fetchall())
    assert len(rows) == 1000 and sorted(rows.values()) == list(range(1000))
    assert [rows[k] for k in keys] == list(range(1000))  # each future has its own message's key
    injected = server.mutator.faults.injected
    assert injected["unknown_commit_after"] > 5 and injected["unknown_commit_before"] > 5, injected
