"""The subscriber's acks on its own stream (StreamingReceive), as Pub/Sub's StreamingPull
carries them: no call per ack, and the server's answer comes back on the stream, often in
the same response as the next message.

The stream is only a faster road for the same request: each ack keeps its request_id,
and whenever the stream cannot tell the outcome (it ended before the answer came, or
the answer is UNKNOWN_COMMIT, UNAVAILABLE, DEADLINE_EXCEEDED) the subscriber replays
that request_id with the unary Ack, whose retry rules resolve it (the commit ledger
answers a committed request with its recorded response). A definite error (a lease no
longer held, a message gone) is the ack's own, as on the unary call.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from spanq_proto.v1 import queue_pb2

from ._errors import SpanqError, from_stream_error
from ._retry import _retryable

ANSWER_TIMEOUT = 30.0
"""Seconds an ack waits for its answer on the stream before the unary replay takes over."""


class StreamAcks:
    """The acks in flight on one open StreamingReceive call, by request_id."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._waiting: dict[str, asyncio.Future[queue_pb2.StreamAnswer]] = {}
        self.open = True

    def answered(self, answers: Any) -> None:
        """The reader's: answers that came on the stream."""
        for answer in answers:
            waiter = self._waiting.pop(answer.request_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(answer)

    def ended(self) -> None:
        """The reader's, as the stream ends: the acks still waiting learn it from the unary replay."""
        self.open = False
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.cancel()
        self._waiting.clear()

    async def ack(self, request: queue_pb2.AckRequest) -> queue_pb2.AckResponse | None:
        """The ack's response, or None when the stream could not tell (replay the request_id);
        raises the ack's definite error as a SpanqError."""
        if not self.open:
            return None
        waiter: asyncio.Future[queue_pb2.StreamAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = waiter
        try:
            # A stream that has ended raises here (AioRpcError, or InvalidStateError when it ended OK).
            await self._call.write(queue_pb2.StreamingReceiveRequest(ack=request))
            answer = await asyncio.wait_for(waiter, ANSWER_TIMEOUT)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the caller's own cancellation
            return None  # the stream ended (``ended``)
        except (asyncio.TimeoutError, asyncio.InvalidStateError, grpc.RpcError, grpc.aio.UsageError):
            return None
        finally:
            self._waiting.pop(request.request_id, None)
        if answer.WhichOneof("result") == "ack":
            return answer.ack
        error: SpanqError = from_stream_error(answer.error)
        if _retryable(error):
            return None
        raise error
