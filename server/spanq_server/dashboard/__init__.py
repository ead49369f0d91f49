"""The web dashboard (``spanq serve --ui-listen``): queues with their charts and
marks (watch.py), a queue's messages and their search, purge, redrive and its
pauses (an UpdateQueue of disable_send / disable_delivery), its settings (an
UpdateQueue), a send form (a Send, exactly once by the form's request_id), one
message's delete, release and redrive, its consumers (the open Receive streams of
every server on the database: this one's live, the others' as of their last report
to the stream roster, domain/receive/roster.py), open streams; its archive (a Peek
of it) and the replay of the range a page of it shows (a Replay). Static pages
(static/, no build step) call a small JSON API here, which calls the domain
in-process (admin.Operator, the catalog, the receiver, exactly_once.py through
edge/requests.py: the RPCs' own decoding).

With a token file, each API call carries ``Authorization: Bearer <token>`` (the
page keeps the token in sessionStorage, never in a URL) and is checked by
access.py's rule for the RPC it stands for: a page needs what its RPC needs.

Every request must name an allowed host (the listen address, localhost, or
--ui-allowed-hosts): a DNS-rebinding page, whose own name resolves to this
machine, would otherwise be same-origin here.
"""

import dataclasses
import importlib.resources
import json
import math
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from google.protobuf import json_format
from google.protobuf.json_format import ParseError

from spanq_proto.v1 import queue_pb2

from ..domain.exactly_once import ExactlyOnce
from ..domain.operator import Operator, PeekFilter, RedriveProgress  # PeekFilter: the operator's, kept by the store
from ..domain.queues import UPDATABLE, Catalog
from ..domain.receive.roster import Roster, describe
from ..domain.receive.stream import Receiver
from ..edge import auth, codec, requests, status
from ..edge.views import peek_response, queue_to_proto, stats_response
from ..ground import errors
from ..ground.clock import Clock
from ..ground.model import ReplayWindow
from ..metrics.rates import Rates
from .http import HttpError, HttpServer, Request, Response, json_response, split_host
from .watch import Watch

STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/style.css": ("style.css", "text/css; charset=utf-8")}
HTTP_STATUS = {"INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
               "ALREADY_EXISTS": 409, "FAILED_PRECONDITION": 409, "ABORTED": 409, "OUT_OF_RANGE": 400,
               "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503}
RATE_STEP = 10
"""Seconds per point of the rate charts (the last rates.HISTORY seconds)."""
MESSAGE_ACTIONS = ("delete", "release", "redrive")
"""POST /api/queues/NAME/messages/ACTION {"key": [...], "to": QUEUE}: one message's action."""
SETTINGS = tuple(field for field in UPDATABLE if field not in ("disable_send", "disable_delivery"))
"""POST /api/queues/NAME/settings {FIELD: VALUE, ...}: UpdateQueue of those (spanq.v1 Queue's JSON form:
durations as "30s"); the pauses have their own action."""
ONE_MICROSECOND = timedelta(microseconds=1)
"""The archive's ack times are microseconds: a replay through an instant ends one later."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
"""Host names the dashboard always answers for, beside its listen address and --ui-allowed-hosts."""


def _dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


class Dashboard:
    def __init__(self, catalog: Catalog, operator: Operator, receiver: Receiver, rates: Rates,
                 tokens: auth.Tokens | None, rule: Callable[[str], auth.Rule], clock: Clock,
                 allowed_hosts: Sequence[str] = (), *, exactly_once: ExactlyOnce, roster: Roster) -> None:
        """``rule``: the spanq.v1 rule of a QueueService method by its name (access.rule),
        handed in by server.py, so that this front-end does not import the other.
        ``roster``: every server's streams, and this one's name (address and pid)."""
        self._catalog = catalog
        self._once = exactly_once
        self._roster = roster
        self._clock = clock
        self._rule = rule
        self._operator = operator
        self._receiver = receiver
        self._rates = rates
        self._tokens = tokens
        self._refusals = auth.RefusalLog(clock)
        self._watch = Watch(clock)
        self._hosts = {host[0] for host in map(split_host, (*LOCAL_HOSTS, *allowed_hosts)) if host is not None}
        self._http = HttpServer(self._handle)
        self._files = {path: importlib.resources.files(__package__).joinpath("static", name).read_bytes()
                       for path, (name, _) in STATIC.items()}

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> int:
        listen = split_host(host)
        if listen is not None:
            self._hosts.add(listen[0])
        return await self._http.start(host, port, tls)

    async def stop(self) -> None:
        await self._http.stop()

    # -- routing ---------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        self._check_host(request)
        if request.method == "GET" and request.path in STATIC:
            return Response(body=self._files[request.path], content_type=STATIC[request.path][1], cache=True)
        parts = request.path.strip("/").split("/")
        if parts[0] != "api":
            raise HttpError(404, f"no page at {request.path}; the dashboard is at /")
        body: dict[str, Any] = {}
        if request.method == "POST":
            self._check_same_origin(request)
            body = request.json()  # a JSON object, checked before any action runs
        route = (request.method, *parts[1:2], *(["*"] if len(parts) > 2 else []), *parts[3:])
        try:
            if route == ("GET", "queues"):
                return json_response(await self._queues(request))
            if route == ("GET", "streams"):
                return json_response(await self._streams(request))
            if route == ("GET", "queues", "*"):
                return json_response(await self._queue(request, parts[2]))
            if route == ("GET", "queues", "*", "messages"):
                return json_response(await self._messages(request, parts[2]))
            if route == ("GET", "queues", "*", "archive"):
                return json_response(await self._archive(request, parts[2]))
            if route == ("POST", "queues", "*", "replay"):
                return json_response(await self._replay(request, parts[2], body))
            if route == ("GET", "queues", "*", "consumers"):
                return json_response(await self._consumers(request, parts[2]))
            if route == ("POST", "queues", "*", "send"):
                return json_response(await self._send(request, parts[2], body))
            if route == ("POST", "queues", "*", "settings"):
                return json_response(await self._settings(request, parts[2], body))
            if route == ("POST", "queues", "*", "purge"):
                return json_response(await self._purge(request, parts[2]))
            if route == ("POST", "queues", "*", "pause"):
                return json_response(await self._pause(request, parts[2], body))
            if route == ("POST", "queues", "*", "redrive"):
                return await self._redrive(request, parts[2], body)
            if route[:4] == ("POST", "queues", "*", "messages") and len(route) == 5 and route[4] in MESSAGE_ACTIONS:
                return json_response(await self._message_action(request, parts[2], route[4], body))
        except errors.QueueError as exc:
            return _error(exc)
        raise HttpError(404 if request.method in ("GET", "POST") else 405,
                        f"no API at {request.method} {request.path}")

    def _check_host(self, request: Request) -> None:
        """A DNS-rebinding page (its own name made to resolve to this machine) passes the
        same-origin rules: its Host header gives it away. The name is checked, not the port,
        which a tunnel may change (a page on another port is another origin anyway)."""
        header = request.headers.get("host")
        if not header:
            raise HttpError(400, "the request has no Host header")
        host = split_host(header)
        if host is None or host[0] not in self._hosts:
            raise HttpError(421, f"this dashboard does not answer for host {header[:100]!r}: open it at its listen "
                                 "address or localhost, or give that name to `spanq serve --ui-allowed-hosts` "
                                 "(other names are refused against DNS rebinding)")

    @staticmethod
    def _check_same_origin(request: Request) -> None:
        """Another site's page cannot make the browser post here: a JSON body needs CORS,
        which this server never grants, and a browser's Origin must be this server."""
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise HttpError(400, "the dashboard's actions take a JSON body (Content-Type: application/json)")
        origin = request.headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host"):
            raise HttpError(403, f"a request from origin {origin!r} is not this dashboard's; use the dashboard's page")

    # -- authorization: access.py's rule of the RPC each call stands for ----------------

    def _principal(self, request: Request) -> auth.Principal | None:
        if self._tokens is None:
            return None
        header = request.headers.get("authorization")
        metadata = [("authorization", header)] if header is not None else []
        try:
            return self._tokens.authenticate(metadata)
        except errors.QueueError as exc:
            self._refused(request, exc)
            raise

    def _require(self, request: Request, principal: auth.Principal | None, method: str, rpc: Any) -> None:
        if principal is None:
            return
        try:
            self._rule(method)(principal, rpc)
        except errors.QueueError as exc:
            self._refused(request, exc)
            raise

    def _refused(self, request: Request, exc: errors.QueueError) -> None:
        self._refusals(f"dashboard {request.method} {request.path}", exc, request.peer)

    def _may(self, principal: auth.Principal | None, method: str, rpc: Any) -> bool:
        if principal is None:
            return True
        try:
            self._rule(method)(principal, rpc)
            return True
        except errors.PermissionDenied:
            return False

    # -- the API -----------------------------------------------------------------------

    async def _visible(self, request: Request) -> tuple[auth.Principal | None, list[str], list[str], set[str]]:
        """The queues ListQueues shows this caller: those it may read stats of, and the rest;
        and the names of every dead-letter queue."""
        principal = self._principal(request)
        names: list[str] = []
        dead_letter_queues: set[str] = set()
        token = ""
        while True:
            found, token = await self._catalog.list(0, token)
            names += [q.name for q in found if principal is None or principal.privileges(q.name)]
            dead_letter_queues |= {q.dead_letter_queue for q in found if q.dead_letter_queue}
            if not token:
                break
        readable = [n for n in names if self._may(principal, "GetQueueStats", queue_pb2.GetQueueStatsRequest(name=n))]
        return principal, readable, [n for n in names if n not in readable], dead_letter_queues

    async def _stats(self, name: str, dead_letter_queue: bool) -> dict[str, Any]:
        """GetQueueStats' figures, sampled for the charts, with the queue's marks and series."""
        stats = await self._operator.stats(name)
        self._watch.record(name, stats.counts)
        out = _dict(stats_response(stats))
        out["marks"] = self._watch.marks(name, stats.counts, dead_letter_queue)
        out["sent_series"] = self._rates.series(name, "sent", RATE_STEP)
        out["acked_series"] = self._rates.series(name, "acked", RATE_STEP)
        out.update((f"{k}_series", v) for k, v in self._watch.series(name, RATE_STEP).items())
        return out

    async def _queues(self, request: Request) -> dict[str, Any]:
        principal, readable, denied, dead_letter_queues = await self._visible(request)
        rows = []
        for name in readable:
            try:
                rows.append(await self._stats(name, name in dead_letter_queues))
            except errors.QueueNotFound:
                continue  # dropped meanwhile
        if principal is None:
            self._watch.forget_missing(set(readable))
        return {"queues": rows, "denied": denied, "rate_step": RATE_STEP}

    async def _streams(self, request: Request) -> dict[str, Any]:
        _, readable, _, _ = await self._visible(request)
        streams = await self._roster.counts()
        rows = []
        for name in readable:
            try:
                counts = (await self._operator.stats(name)).counts
            except errors.QueueNotFound:
                continue
            rows.append({"name": name, "streams": streams.get(name, 0), "leased": counts.leased})
        return {"queues": rows, "open_streams": sum(streams.get(n, 0) for n in readable)}

    async def _queue(self, request: Request, name: str) -> dict[str, Any]:
        principal = self._principal(request)
        self._require(request, principal, "GetQueueStats", queue_pb2.GetQueueStatsRequest(name=name))
        queue = await self._catalog.get(name)
        sources = await self._operator.dead_letter_sources(name)
        return {"queue": _dict(queue_to_proto(queue)), "stats": await self._stats(name, bool(sources)),
                "dead_letter_sources": sources, "rate_step": RATE_STEP, "consumers": await self._describe(name),
                "key_generated": queue.key_generated,
                "may_send": self._may(principal, "Send", queue_pb2.SendRequest(queue=name)),
                "may_purge": self._may(principal, "Purge", queue_pb2.PurgeRequest(queue=name)),
                "may_pause": self._may(principal, "UpdateQueue", _pausing(name, {})),
                "may_delete": self._may(principal, "Ack", queue_pb2.AckRequest(queue=name)),
                "may_release": self._may(principal, "RenewLease", queue_pb2.RenewLeaseRequest(queue=name)),
                "may_redrive": bool(sources) and self._may(
                    principal, "Redrive", queue_pb2.RedriveRequest(queue=name, to=sources[0]))}

    async def _messages(self, request: Request, name: str) -> dict[str, Any]:
        self._require(request, self._principal(request), "Peek", queue_pb2.PeekRequest(queue=name))
        size = request.query.get("page_size", "0")
        if not (size.isascii() and size.isdigit()):  # str.isdigit() takes '²', which int() refuses
            raise errors.InvalidArgument(f"page_size must be a whole number, got {size!r}")
        q = {k: v for k, v in request.query.items() if v != ""}  # an empty filter field: not filtered
        attempt = q.get("min_attempt")
        if attempt is not None and not (attempt.isascii() and attempt.isdigit()):
            raise errors.InvalidArgument(f"min_attempt must be a whole number, got {attempt!r}")
        where = PeekFilter(key_prefix=q.get("key_prefix"), state=q.get("state"),
                           min_attempt=int(attempt) if attempt is not None else None, text=q.get("text"))
        queue, found, token = await self._operator.peek(name, int(size), request.query.get("page_token", ""), where)
        out = _dict(peek_response(queue, found, token))
        out["payload_type"] = queue.payload_type.value
        return out

    async def _archive(self, request: Request, name: str) -> dict[str, Any]:
        """A page of the archive in ack order (a Peek with archived), with what the page needs
        to offer its replay."""
        principal = self._principal(request)
        self._require(request, principal, "Peek", queue_pb2.PeekRequest(queue=name))
        size = request.query.get("page_size", "0")
        if not (size.isascii() and size.isdigit()):
            raise errors.InvalidArgument(f"page_size must be a whole number, got {size!r}")
        queue, found, token = await self._operator.peek(name, int(size), request.query.get("page_token", ""),
                                                        archived=True)
        out = _dict(peek_response(queue, found, token))
        out["payload_type"] = queue.payload_type.value
        out["archive_duration"] = _dict(queue_to_proto(queue)).get("archive_duration")
        out["may_replay"] = self._may(principal, "Replay", queue_pb2.ReplayRequest(queue=name))
        return out

    async def _replay(self, request: Request, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """{"from": TIME, "through": TIME, "request_id": ID, "validate_only": bool}: a Replay of the
        messages acked from ``from`` through ``through`` (both included: the first and last ack
        times of a page of the archive), its final progress; ``validate_only``: their count."""
        self._require(request, self._principal(request), "Replay", queue_pb2.ReplayRequest(queue=name))
        validate_only = body.get("validate_only", False)
        if not isinstance(validate_only, bool):
            raise errors.InvalidArgument("`validate_only` must be true or false")
        rpc = _parse({"queue": name, "start_time": _text(body, "from"), "end_time": _text(body, "through")},
                     queue_pb2.ReplayRequest())
        start = codec.timestamp_to_datetime(rpc.start_time, "from")
        window = ReplayWindow(start, codec.timestamp_to_datetime(rpc.end_time, "through") + ONE_MICROSECOND)
        last = None
        async for last in self._operator.replay(name, window, _text(body, "request_id"), validate_only=validate_only):
            pass
        assert last is not None and last.done  # the replay ends with a done progress, or raises
        return dataclasses.asdict(last)

    async def _message_action(self, request: Request, name: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """One message's delete, release or redrive, by the rule of the RPC it stands for."""
        key, to = body.get("key"), body.get("to", "")
        if not isinstance(to, str):
            raise errors.InvalidArgument("`to` must be a queue name")
        principal = self._principal(request)
        if action == "delete":
            self._require(request, principal, "Ack", queue_pb2.AckRequest(queue=name))
            await self._operator.delete(name, key)
            return {"deleted": key}
        if action == "release":
            self._require(request, principal, "RenewLease", queue_pb2.RenewLeaseRequest(queue=name))
            await self._operator.release(name, key)
            return {"released": key}
        if not to:
            sources = await self._operator.dead_letter_sources(name)
            to = sources[0] if len(sources) == 1 else ""
        self._require(request, principal, "Redrive", queue_pb2.RedriveRequest(queue=name, to=to))
        return {"redriven": key, "to": await self._operator.redrive_one(name, key, to)}

    async def _pause(self, request: Request, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """{"disable_send": bool, "disable_delivery": bool} (either or both): an UpdateQueue of those."""
        changes = {k: v for k, v in body.items() if k in ("disable_send", "disable_delivery")}
        if not changes or len(changes) != len(body) or not all(isinstance(v, bool) for v in changes.values()):
            raise errors.InvalidArgument('give "disable_send" and/or "disable_delivery", each true or false')
        self._require(request, self._principal(request), "UpdateQueue", _pausing(name, changes))
        return {"queue": _dict(queue_to_proto(await self._catalog.update(name, changes)))}

    async def _consumers(self, request: Request, name: str) -> dict[str, Any]:
        self._require(request, self._principal(request), "GetQueueStats", queue_pb2.GetQueueStatsRequest(name=name))
        await self._catalog.get(name)  # NOT_FOUND for a queue that is not there
        return await self._describe(name)

    async def _describe(self, name: str) -> dict[str, Any]:
        """The queue's open Receive streams on every server: this one's as they are now
        (receive/stream.py keeps them), the others' as of their last report (``reported_ago``
        seconds: roster.py)."""
        now = self._clock.now() or datetime.now(timezone.utc)
        here = self._roster.server
        streams = [{**describe(s), "server": here, "reported_ago": 0.0} for s in self._receiver.streams(name)]
        streams += [{**r.stream, "server": r.server, "reported_ago": round(r.reported_ago, 1)}
                    for r in await self._roster.elsewhere(name)]
        for s in streams:
            s["age_seconds"] = max(0.0, (now - datetime.fromisoformat(s["opened_at"])).total_seconds())
        return {"server": here, "servers": sorted({s["server"] for s in streams}), "streams": streams}

    async def _send(self, request: Request, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The send form: {"request_id", "key": [...], "payload": TEXT, "delay": SECONDS, "headers":
        "KEY=VALUE" lines, "priority": 0-9, "ordering_key": TEXT}, sent as spanq.v1 Send is (edge/requests.py): the same
        checks and errors, and a request_id sent again answers its first send (replayed)."""
        self._require(request, self._principal(request), "Send", queue_pb2.SendRequest(queue=name))
        queue = await self._catalog.get(name)
        message: dict[str, Any] = {"payload": _payload(queue.payload_type.value, _text(body, "payload"))}
        key = body.get("key")
        if key not in (None, []):
            message["key"] = key
        delay = _text(body, "delay").strip()
        if delay:
            try:
                seconds = float(delay)
            except ValueError:
                raise errors.InvalidArgument(f"delay must be a number of seconds, got {delay[:40]!r}") from None
            if not math.isfinite(seconds):
                raise errors.InvalidArgument(f"delay must be a number of seconds, got {delay[:40]!r}")
            message["delay"] = f"{seconds:.6f}s"  # Duration's JSON form; the codec checks its range
        headers = _headers(_text(body, "headers"))
        if headers:
            message["headers"] = headers
        priority = _text(body, "priority").strip() or "0"
        if not (priority.isascii() and priority.isdigit()):
            raise errors.InvalidArgument(f"priority must be a whole number from 0 to 9, got {priority[:40]!r}")
        message["priority"] = int(priority)
        ordering_key = _text(body, "ordering_key")
        if ordering_key:
            message["ordering_key"] = ordering_key  # checked by the send (its length; the queue's ordering)
        rpc = _parse({"queue": name, "request_id": _text(body, "request_id"), "messages": [message]},
                     queue_pb2.SendRequest())
        return _dict(await requests.send(self._catalog, self._once, rpc))

    async def _settings(self, request: Request, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The settings form: the fields it changed, in spanq.v1 Queue's JSON form, as one
        UpdateQueue (edge/requests.py's reading of it; the catalog's checks)."""
        if not body or any(field not in SETTINGS for field in body):
            raise errors.InvalidArgument(f"give one or more of {', '.join(SETTINGS)}")
        rpc = queue_pb2.UpdateQueueRequest()
        _parse({"name": name, **body}, rpc.queue)
        rpc.update_mask.paths.extend(body)
        self._require(request, self._principal(request), "UpdateQueue", rpc)
        return {"queue": _dict(queue_to_proto(await self._catalog.update(name, requests.queue_changes(rpc))))}

    async def _purge(self, request: Request, name: str) -> dict[str, Any]:
        self._require(request, self._principal(request), "Purge", queue_pb2.PurgeRequest(queue=name))
        return {"purged": await self._operator.purge(name, None)}

    async def _redrive(self, request: Request, name: str, body: dict[str, Any]) -> Response:
        to = body.get("to", "")
        if not isinstance(to, str):
            raise errors.InvalidArgument("`to` must be a queue name")
        self._require(request, self._principal(request), "Redrive", queue_pb2.RedriveRequest(queue=name, to=to))
        progress = cast(AsyncGenerator[RedriveProgress, None], self._operator.redrive(name, to))
        first = await anext(progress)  # errors before anything moved answer with their status

        async def lines() -> AsyncIterator[bytes]:
            p = first
            try:
                while True:
                    yield (json.dumps({"moved": p.moved, "remaining": p.remaining, "skipped": p.skipped,
                                       "to": p.to, "done": p.done}) + "\n").encode()
                    if p.done:
                        return
                    p = await anext(progress)
            except errors.QueueError as exc:
                yield (json.dumps({"error": str(exc)}) + "\n").encode()
            finally:
                await progress.aclose()

        return Response(content_type="application/x-ndjson", stream=lines())


def _pausing(name: str, changes: dict[str, Any]) -> queue_pb2.UpdateQueueRequest:
    request = queue_pb2.UpdateQueueRequest(queue=queue_pb2.Queue(name=name, **changes))
    request.update_mask.paths.extend(changes)
    return request


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field, "")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise errors.InvalidArgument(f"`{field}` must be text")
    return str(value)


def _payload(payload_type: str, text: str) -> Any:
    """The form's payload text as spanq.v1's JSON form holds it: JSON parsed, BYTES as base64, STRING as is."""
    if payload_type != "JSON":
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        raise errors.InvalidArgument(f"the payload is not JSON ({exc}); the queue's payload type is JSON") from None
    except RecursionError:
        raise errors.InvalidArgument("the payload is JSON nested too deep") from None


def _headers(text: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise errors.InvalidArgument(f"headers line {number} ({line[:40]!r}) is not KEY=VALUE")
        headers[name.strip()] = value
    return headers


def _parse(data: dict[str, Any], message: Any) -> Any:
    """spanq.v1's JSON form into its message, a field that does not fit it INVALID_ARGUMENT."""
    try:
        return json_format.ParseDict(data, message)
    except ParseError as exc:
        raise errors.InvalidArgument(str(exc)) from None


def _error(exc: errors.QueueError) -> Response:
    code = status.code_and_reason(exc)[0].name
    return json_response({"error": str(exc), "code": code}, HTTP_STATUS.get(code, 500))
