"""The stream roster: every server's open Receive streams, for the dashboard's
consumers list across ``--workers`` children and replicas of one database.

Each server publishes its own streams to one row of spanq.stream_roster: when a
stream opens or closes (at most once per MIN_GAP, so that churning streams cost
one write a second, not one per stream), and on a heartbeat while it has any
(their held and delivered figures move on). A server with no streams deletes its
row, so an idle one writes nothing; a stopping one deletes it too. A server that
died leaves a row whose heartbeat goes stale: reads leave it out after
STALE_AFTER, and the next server that publishes deletes it.

Why the database rather than asking the siblings: it is the one thing every
server already shares. Replicas do not know each other's addresses (the design
keeps no state outside PostgreSQL), and --workers children share one port, so a
request for "the other worker" cannot be addressed to it. The price is that
another server's figures are as old as its last report (at most HEARTBEAT).
"""

import asyncio
import logging
import secrets
import time
from datetime import timedelta
from typing import Any

from ...ground import errors
from ...ground.model import ReportedStream
from ...ground.tasks import BackgroundTask
from ...store import Store
from .stream import OpenStream, Receiver

logger = logging.getLogger(__name__)

HEARTBEAT = timedelta(seconds=5)
"""How often a server with open streams reports them again."""
STALE_AFTER = 3 * HEARTBEAT
"""A row not reported for this long is a dead server's: left out, then deleted."""
MIN_GAP = 1.0
"""Seconds between two reports of one server, however fast its streams open and close."""


def describe(s: OpenStream) -> dict[str, Any]:
    """One stream as the roster and the dashboard show it (JSON)."""
    return {"queue": s.queue, "peer": s.peer, "opened_at": s.opened_at.isoformat(), "held": s.held,
            "delivered": s.delivered, "max_outstanding": s.max_outstanding, "max_batch_size": s.max_batch_size,
            "lease_duration_seconds": s.lease_duration.total_seconds()}


class Roster:
    """Publishes this server's streams (``start``/``stop``) and reads the others'."""

    def __init__(self, store: Store, receiver: Receiver, server: str,
                 heartbeat: timedelta = HEARTBEAT, stale_after: timedelta = STALE_AFTER) -> None:
        self.server = server
        """This server as an operator knows it (host, address, pid)."""
        self._instance = secrets.token_hex(8)  # a pid repeats across hosts and containers
        self._store = store
        self._receiver = receiver
        self._heartbeat = heartbeat.total_seconds()
        self._stale_after = stale_after
        self._changed = asyncio.Event()
        self._published = False  # this server has a row
        self._task = BackgroundTask("stream-roster", self._publish_forever)
        receiver.on_change(self._changed.set)

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        """Stops reporting and deletes this server's row (its streams are ending)."""
        await self._task.stop()
        if self._published:
            try:
                await self._store.roster_withdraw(self._instance)
                self._published = False
            except errors.QueueError as exc:
                logger.warning("could not withdraw this server's streams from the roster (%s); "
                               "they drop out of the list within %s", exc, self._stale_after)

    async def elsewhere(self, queue: str) -> list[ReportedStream]:
        """The queue's open streams on every other live server, as they last reported them."""
        return await self._store.roster_streams(self._instance, queue, self._stale_after)

    async def counts(self) -> dict[str, int]:
        """Open streams per queue on every server: this one's now, the others' as reported."""
        counts = await self._store.roster_counts(self._instance, self._stale_after)
        for queue, here in self._receiver.streams_by_queue().items():
            counts[queue] = counts.get(queue, 0) + here
        return counts

    async def publish(self) -> None:
        """Reports this server's streams now (or deletes its row when it has none)."""
        streams = [describe(s) for s in self._receiver.every_stream()]
        if streams:
            await self._store.roster_publish(self._instance, self.server, streams, self._stale_after)
            self._published = True
        elif self._published:
            await self._store.roster_withdraw(self._instance)
            self._published = False

    async def _publish_forever(self) -> None:
        last = -MIN_GAP
        failing = False  # the last report failed: try again at the next heartbeat, said once
        while True:
            try:
                await asyncio.wait_for(self._changed.wait(), self._heartbeat if self._published or failing else None)
            except TimeoutError:
                pass  # the heartbeat: the same streams, their figures moved on
            gap = last + MIN_GAP - time.monotonic()
            if gap > 0:
                await asyncio.sleep(gap)  # streams opening together make one report
            self._changed.clear()
            last = time.monotonic()
            try:
                await self.publish()
            except errors.QueueError as exc:
                if not failing:
                    logger.warning("could not report this server's streams to the roster (%s); retrying every %.0f s",
                                   exc, self._heartbeat)
                failing = True
                continue
            if failing:
                logger.info("this server's streams are reported to the roster again")
            failing = False
