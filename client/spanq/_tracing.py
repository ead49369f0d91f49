"""Trace context in message headers, through the OpenTelemetry API when it is installed
(``pip install 'spanq[otel]'``); without it every function here is a no-op.

The spans follow OpenTelemetry's messaging conventions: a PRODUCER span ``send <queue>``
around a send (its context goes into every message's headers as W3C ``traceparent`` and
``tracestate``, through the global propagator), a PRODUCER span ``create <queue>`` per
published message (the publisher sends it later, in a batch of others), and a CONSUMER
span ``process <queue>`` around a subscriber's callback: a child of the producer's
context, so that one trace runs from the request that sent a message to the worker that
processed it, and linked to it, as the conventions ask of every consumer span.
"""

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # the optional extra is not installed
    propagate = trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from ._types import Message

SYSTEM = "spanq"
_SCOPE = "spanq"


def recording() -> bool:
    """Whether an OpenTelemetry SDK is set up: until one is, every span is a no-op, and
    making one per published message cost the publisher a third of its rate
    (``python -m bench --quick --only pub``)."""
    return trace is not None and not isinstance(trace.get_tracer_provider(),
                                                (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def current_context() -> dict[str, str] | None:
    """The caller's trace context as headers, when it has one (no span of ours: see recording)."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


@contextlib.contextmanager
def producing(queue: str, operation: str, count: int = 1) -> Iterator[dict[str, str] | None]:
    """A PRODUCER span (``send`` or ``create``) for ``count`` messages to ``queue``; yields the
    headers that carry its context (None without OpenTelemetry)."""
    if not recording():  # no span to make: carry on the caller's context, if it has one
        yield current_context()
        return
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.destination.name": queue,
        "messaging.operation.name": operation, "messaging.operation.type": operation,
    }
    if count > 1:
        attributes["messaging.batch.message_count"] = count
    tracer = trace.get_tracer(_SCOPE)
    with tracer.start_as_current_span(f"{operation} {queue}", kind=trace.SpanKind.PRODUCER,
                                      attributes=attributes):
        context: dict[str, str] = {}
        propagate.inject(context)
        yield context


def with_context(headers: Mapping[str, str] | None, context: Mapping[str, str] | None) -> dict[str, str] | None:
    """A message's headers with the trace context added (the message's own win: a caller
    that set ``traceparent`` meant it)."""
    if not context:
        return dict(headers) if headers else None
    return {**context, **headers} if headers else dict(context)


@contextlib.contextmanager
def processing(message: "Message") -> Iterator[None]:
    """A CONSUMER span around the processing of one delivered message: a child of the context
    its headers carry, and linked to it."""
    if not recording():
        yield
        return
    parent = propagate.extract(message.headers) if message.headers else None
    links = []
    if parent is not None:
        producer = trace.get_current_span(parent).get_span_context()
        if producer.is_valid:
            links.append(trace.Link(producer))
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.destination.name": message.queue,
        "messaging.operation.name": "process", "messaging.operation.type": "process",
    }
    tracer = trace.get_tracer(_SCOPE)
    with tracer.start_as_current_span(f"process {message.queue}", context=parent, kind=trace.SpanKind.CONSUMER,
                                      links=links, attributes=attributes):
        yield
