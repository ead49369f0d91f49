"""The domain's counters: what this server committed and delivered, counted as it
happens. The domain calls the hooks after the fact; they are cheap (a counter
increment on a child looked up once per queue) and touch no database.

prometheus_client's metric types only: no gRPC, no HTTP server (metrics/__init__.py).
"""

import os
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.registry import Collector

from ..ground.model import LeasedMessage
from .rates import Rates

IN_FILES = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
"""prometheus_client keeps this process's metrics in multiprocess files (a --workers
child's); it decides so at import, from the same variable."""


class Counters:
    """One server's counters, in its registry. Hooks: sent, acked, nacked, delivered,
    refunded, undeliverable, expired, listener_listening; forget_queue when a queue is dropped."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        """The server's registry, which these counters are in (the timing histogram and
        the endpoint's collector join it)."""
        r = registry
        self._sent = Counter("spanq_queue_messages_sent", "Messages sent (stored by a committed request) "
                             "through this server; Spanner's message_send_count.", ["queue"], registry=r)
        self._acked = Counter("spanq_queue_messages_acked", "Messages acknowledged (deleted by a committed "
                              "request) through this server; Spanner's message_ack_count.", ["queue"], registry=r)
        self._nacked = Counter("spanq_queue_nacks", "Lease tokens named in committed releases (RenewLease with "
                               "lease_duration 0) through this server, whether or not the lease was still held.",
                               ["queue"], registry=r)
        self._delivered = Counter("spanq_queue_messages_delivered", "Messages leased to this server's Receive "
                                  "streams (every delivery attempt).", ["queue"], registry=r)
        self._redelivered = Counter("spanq_queue_messages_redelivered", "Messages leased to this server's Receive "
                                    "streams with delivery_attempt > 1: their previous lease expired or was "
                                    "released (nacked). Stands in for Spanner's lease_expiration_count.",
                                    ["queue"], registry=r)
        self._refunded = Counter("spanq_queue_attempts_refunded", "Delivery attempts given back to messages "
                                 "leased to this server's Receive streams whose clients showed they did not read "
                                 "them (a write blocked, the stream ended for letting every lease lapse, or every "
                                 "lease past the last response the client settled a message of lapsed): the lease "
                                 "stays, and the next delivery counts the same attempt again.", ["queue"], registry=r)
        self._undeliverable = Counter("spanq_queue_messages_undeliverable", "Messages leased to this server's "
                                      "Receive streams that no client can receive (a value written by SQL that "
                                      "spanq.v1 cannot encode): moved to the dead-letter queue, or, without one, "
                                      "left in the queue (counted once per message and server).",
                                      ["queue"], registry=r)
        self._expired = Counter("spanq_queue_messages_expired", "Unacknowledged messages deleted by this server "
                                "for being older than their queue's message_retention_duration (Spanner's ROW "
                                "DELETION POLICY).", ["queue"], registry=r)
        self._listening = Gauge("spanq_wakeup_listener_listening", "1 while this server's wake-up listener has "
                                "proved (by hearing its own probe notification) that it hears sends made elsewhere; "
                                "0 while it cannot, as behind a transaction-mode pooler: streams then poll every "
                                "--deaf-poll-interval. With --workers, the lowest of the live workers'.",
                                multiprocess_mode="livemin", registry=r)
        self._queue_counters = (self._sent, self._acked, self._nacked, self._delivered, self._redelivered,
                                self._refunded, self._expired)
        self._children: dict[tuple[Counter, str], Any] = {}
        self.rates = Rates()
        """Send and ack rates over the last minute, fed by the same hooks (GetQueueStats)."""

    # -- hooks (hot path: one dict lookup and one increment) -----------------------

    def _child(self, counter: Counter, queue: str) -> Any:
        child = self._children.get((counter, queue))
        if child is None:
            child = self._children[(counter, queue)] = counter.labels(queue)
        return child

    def sent(self, queue: str, n: int) -> None:
        self._child(self._sent, queue).inc(n)
        self.rates.add(queue, "sent", n)

    def acked(self, queue: str, n: int) -> None:
        if n:
            self._child(self._acked, queue).inc(n)
            self.rates.add(queue, "acked", n)

    def nacked(self, queue: str, n: int) -> None:
        self._child(self._nacked, queue).inc(n)

    def delivered(self, queue: str, batch: Sequence[LeasedMessage]) -> None:
        self._child(self._delivered, queue).inc(len(batch))
        again = sum(1 for m in batch if m.delivery_attempt > 1)
        if again:
            self._child(self._redelivered, queue).inc(again)

    def refunded(self, queue: str, n: int) -> None:
        if n:
            self._child(self._refunded, queue).inc(n)

    def undeliverable(self, queue: str, n: int) -> None:
        self._child(self._undeliverable, queue).inc(n)

    def expired(self, queue: str, n: int) -> None:
        self._child(self._expired, queue).inc(n)

    def listener_listening(self, listening: bool) -> None:
        self._listening.set(1 if listening else 0)

    # -- dropped queues -------------------------------------------------------------

    def forget_queue(self, queue: str) -> None:
        """Removes a queue's series from every per-queue counter (it was dropped): they
        leave the scrape, and a queue created again under the name counts from zero.
        In a --workers child the files keep them (prometheus_client cannot remove a series
        there): the supervisor leaves out the series of queues not in the catalog."""
        self.rates.forget(queue)
        for counter in self._queue_counters:
            self._children.pop((counter, queue), None)
            if IN_FILES:
                continue
            try:
                counter.remove(queue)
            except KeyError:
                pass  # nothing counted for it

    def counted_queues(self) -> set[str]:
        """The queues some per-queue counter has a series for."""
        return {queue for _, queue in self._children}

    def register_before_queue_counters(self, collector: Collector) -> None:
        """Registers ``collector`` so that a scrape runs it before it reads the per-queue
        counters: the endpoint's collector drops the counters of queues it finds gone."""
        self.registry.register(collector)
        for counter in self._queue_counters:
            self.registry.unregister(counter)
            self.registry.register(counter)
