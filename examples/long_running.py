"""Long-running work: a job that takes longer than the lease, done both ways.

    python examples/long_running.py --target localhost:50051 [--job-seconds 4.5]

The queues here have a 2-second lease and redeliver at once when a lease lapses (``initial_backoff=0``), so
any lapse would show: a second receiver polls the queue all along and would be handed the job. The three
ways run side by side, each with its own queue.

1. Keep the lease renewed while the job runs:
   a. by the subscriber: its lease manager renews the leases of messages whose callbacks are still running
      (about halfway through each lease, up to ``FlowControl.max_lease_duration`` in total);
   b. by hand: a message from ``receive`` is not renewed for you; the worker calls ``message.renew()``
      between steps of its work, and acks at the end.
2. Hold no lease while the job runs: the job runs elsewhere (an export service, a batch system), and each
   step of the worker acks its message and sends a follow-up message for the future in ONE commit (the
   transaction builder over the Commit RPC; Spanner's ack-and-resend pattern). The follow-up, "check the
   export again in 0.5 s", reuses the job's key: the job is always exactly one message, either the step
   being handled or the next step waiting for its time. No worker has to stay alive while the job runs,
   and a crash between steps loses nothing: the commit either acked and rescheduled, or did neither.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
import uuid
from datetime import timedelta
from typing import Any

import spanq
import spanq.aio

LEASE = 2.0
"""Seconds: the queues' lease, much shorter than the jobs."""

RENDERS = "render_jobs"
"""Way 1a: jobs run in a subscriber's callback."""
REPORTS = "report_jobs"
"""Way 1b: jobs received with ``receive`` and renewed by hand."""
EXPORTS = "export_jobs"
"""Way 2: jobs that run elsewhere, checked on by follow-up messages."""


async def setup(client: spanq.aio.Client) -> None:
    """Creates the three queues (kept if they exist)."""
    for queue in (RENDERS, REPORTS, EXPORTS):
        try:
            await client.create_queue(queue, key_columns=[("job", "STRING")], payload_type="JSON",
                                      lease_duration=LEASE, initial_backoff=0)
        except spanq.AlreadyExists:
            pass


class Competitor:
    """A second receiver on the same queue, polling all along: it is handed the job if a lease ever lapses."""

    def __init__(self, client: spanq.aio.Client, queue: str) -> None:
        self._client = client
        self._queue = queue
        self.stolen: list[spanq.Message] = []
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            self.stolen += await self._client.receive(self._queue, 10, timeout=0.2)

    async def __aenter__(self) -> Competitor:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


@dataclasses.dataclass
class Run:
    """What happened to one job."""

    job: str
    deliveries: list[int] = dataclasses.field(default_factory=list)
    """The delivery_attempt of every delivery of the job's messages, in order."""
    lease_tokens: set[str] = dataclasses.field(default_factory=set)
    """Every lease token the job's message carried while it ran (each renewal makes a new one)."""
    seconds: float = 0.0
    """How long the job took, start to finish."""
    stolen: int = 0
    """Messages of the job the competitor was handed (a lapsed lease): must be 0."""
    steps: list[Step] = dataclasses.field(default_factory=list)
    """Way 2: each step's message, as handled."""


@dataclasses.dataclass(frozen=True)
class Step:
    """Way 2: one handled message of a job."""

    phase: str
    delivery_attempt: int
    scheduled_after: float
    """Seconds from the commit that sent this message (its follow-up) to its delivery; 0 for the first."""
    delay: float
    """The delay it was sent with."""
    scheduled: float
    """Seconds from its enqueue time to its deliver time, as the server recorded them."""
    held: float
    """Seconds from its delivery to the end of the commit that acked it: how long its lease was needed."""


# -- way 1a: the subscriber keeps the lease ------------------------------------------------------------


async def run_with_subscriber(client: spanq.aio.Client, seconds: float, log: Any = print) -> Run:
    """Sends one render job and runs it in a subscriber callback that takes ``seconds`` (many leases)."""
    run = Run(f"render-{uuid.uuid4().hex[:8]}")
    started = asyncio.Event()
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()

    def render(message: spanq.Message) -> None:  # a plain function: runs on the subscriber's thread pool
        run.deliveries.append(message.delivery_attempt)
        loop.call_soon_threadsafe(started.set)
        begin = time.monotonic()
        while time.monotonic() - begin < seconds:  # the work, in small steps; nothing here touches the lease
            run.lease_tokens.add(message.lease_token)
            time.sleep(0.05)
        run.seconds = time.monotonic() - begin
        loop.call_soon_threadsafe(finished.set)
        # returning acks the message

    await client.send(RENDERS, {"frames": 240}, key=run.job)
    flow = spanq.FlowControl(max_messages=1, max_lease_duration=timedelta(minutes=10))
    async with client.subscribe(RENDERS, render, flow_control=flow):
        await asyncio.wait_for(started.wait(), 10)
        async with Competitor(client, RENDERS) as competitor:
            await asyncio.wait_for(finished.wait(), seconds + 10)
    run.stolen = len(competitor.stolen)
    log(f"1a. subscriber: {run.job} ran {run.seconds:.1f}s with a {LEASE:g}s lease; deliveries "
        f"{run.deliveries}; {len(run.lease_tokens)} lease tokens (renewed by the subscriber); "
        f"the competitor got {run.stolen}")
    return run


# -- way 1b: renewing by hand --------------------------------------------------------------------------


async def run_with_manual_renewal(client: spanq.aio.Client, seconds: float, log: Any = print) -> Run:
    """Sends one report job, receives it, and renews its lease by hand between steps until done."""
    run = Run(f"report-{uuid.uuid4().hex[:8]}")
    await client.send(REPORTS, {"rows": 100_000}, key=run.job)
    [message] = await client.receive(REPORTS, 1, timeout=10)
    run.deliveries.append(message.delivery_attempt)
    async with Competitor(client, REPORTS) as competitor:
        begin = renewed = time.monotonic()
        while time.monotonic() - begin < seconds:
            run.lease_tokens.add(message.lease_token)
            await asyncio.sleep(0.05)  # a step of the work
            if time.monotonic() - renewed > LEASE / 2:  # well before the lease ends
                await message.renew(LEASE)  # a new token, carried by the message
                renewed = time.monotonic()
        run.seconds = time.monotonic() - begin
        await message.ack()  # with the current token
    run.stolen = len(competitor.stolen)
    log(f"1b. renew by hand: {run.job} ran {run.seconds:.1f}s; deliveries {run.deliveries}; "
        f"{len(run.lease_tokens)} lease tokens (message.renew()); the competitor got {run.stolen}")
    return run


# -- way 2: ack and send a follow-up in one commit -----------------------------------------------------


class ExportService:
    """A stand-in for a service that runs jobs on its own (an export API, a batch system): start one, and
    ask later whether it is done."""

    def __init__(self) -> None:
        self._ends: dict[str, float] = {}

    def start(self, job: str, seconds: float) -> str:
        handle = f"exp-{job}"
        self._ends.setdefault(handle, time.monotonic() + seconds)  # starting it again is harmless
        return handle

    def done(self, handle: str) -> bool:
        return time.monotonic() >= self._ends[handle]


async def run_with_follow_ups(client: spanq.aio.Client, seconds: float, check_every: float = 0.5,
                              log: Any = print) -> Run:
    """Sends one export job; a subscriber starts it on the export service and checks on it with follow-up
    messages ``check_every`` seconds apart, each sent in the same commit that acks the previous step."""
    run = Run(f"export-{uuid.uuid4().hex[:8]}")
    service = ExportService()
    finished = asyncio.Event()
    committed_at: dict[int, float] = {}  # step number -> when the commit that sent it began (monotonic)

    async def step(message: spanq.Message) -> None:  # async def: runs as a task on the client's loop
        now = time.monotonic()
        job = message.payload
        number = job.get("step", 0)
        after = now - committed_at[number] if number else 0.0
        scheduled = (message.deliver_time - message.enqueue_time).total_seconds()
        run.deliveries.append(message.delivery_attempt)
        handle = service.start(str(message.key[0]), job["seconds"]) if job["phase"] == "start" else job["handle"]
        committed_at[number + 1] = time.monotonic()
        done = service.done(handle)  # asked once: the commit and what follows must agree
        async with client.transaction() as tx:  # one Commit: the ack and the follow-up, or neither
            tx.ack(EXPORTS, message)
            if not done:
                follow_up = {"phase": "check", "handle": handle, "step": number + 1, "delay": check_every,
                             "seconds": job["seconds"]}
                tx.send(EXPORTS, follow_up, key=message.key, delay=check_every)
        held = time.monotonic() - now
        run.steps.append(Step(job["phase"], message.delivery_attempt, after, job.get("delay", 0.0), scheduled, held))
        if done:
            finished.set()

    begin = time.monotonic()
    await client.send(EXPORTS, {"phase": "start", "seconds": seconds}, key=run.job)
    async with client.subscribe(EXPORTS, step):
        await asyncio.wait_for(finished.wait(), seconds + 10)
    run.seconds = time.monotonic() - begin
    log(f"2.  ack + follow-up: {run.job} took {run.seconds:.1f}s in {len(run.steps)} steps, each holding its lease "
        f"{max(s.held for s in run.steps) * 1000:.0f} ms at most; deliveries {run.deliveries}; each check arrived "
        f"{min((s.scheduled_after for s in run.steps[1:]), default=0):.2f}s or more after the commit that sent it "
        f"(delay {check_every:g}s)")
    return run


async def story(target: str, seconds: float) -> None:
    async with spanq.aio.Client(target) as client:
        await setup(client)
        print(f"three jobs of {seconds:g}s each, with a {LEASE:g}s lease, side by side:")
        lines: dict[int, str] = {}
        await asyncio.gather(
            run_with_subscriber(client, seconds, log=lambda line: lines.__setitem__(1, line)),
            run_with_manual_renewal(client, seconds, log=lambda line: lines.__setitem__(2, line)),
            run_with_follow_ups(client, seconds, log=lambda line: lines.__setitem__(3, line)),
        )
        for _, line in sorted(lines.items()):
            print(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--target", default="localhost:50051", help="the spanq server, host:port")
    parser.add_argument("--database-url", default=None, help="unused: accepted like the other examples")
    parser.add_argument("--job-seconds", type=float, default=4.5, help="how long each job takes (over two leases)")
    args = parser.parse_args(argv)
    asyncio.run(story(args.target, args.job_seconds))


if __name__ == "__main__":
    main()
