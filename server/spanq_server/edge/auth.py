"""Bearer tokens and per-queue privileges: the token file, the principals it names,
the generic check, and the one gRPC interceptor that enforces it
(docs/operations.md, "Authentication").

Off unless the server is given a token file (``--auth-file``); then every call
but health checking and reflection needs ``authorization: Bearer <token>``
metadata naming a token of the file, and what its method's rule asks. The rules
are the front-ends': access.py says what each spanq.v1 RPC needs, spanner/access.py
what each of Spanner's methods needs (from the statements and mutations it
carries). A served method with no rule is refused for every token: the
authorizer fails closed. The privileges mirror Spanner's fine-grained access
control on queues:

- ``send``: INSERT ON QUEUE (Send, a Commit's send, the Spanner front-end's
  INSERT and Send mutation);
- ``receive``: EXECUTE on RECEIVE_q and RENEWLEASE_q (Receive, RenewLease,
  including a release with lease_duration 0, a Commit's renew_lease);
- ``ack``: DELETE ON QUEUE (Ack, a Commit's ack, DELETE, the Ack mutation);
- ``select``: SELECT ON QUEUE (the Spanner front-end's SELECT ... FROM q; GetQueueStats, Peek);
- ``admin``: queue DDL (CreateQueue, UpdateQueue, DropQueue, CREATE/DROP QUEUE). A CreateQueue
  naming a ``dead_letter_queue`` also needs ``send`` (or ``admin``) on that queue;
  naming a ``parent_table`` (INTERLEAVE IN PARENT) needs ``admin`` on the parent,
  queue or table.
- Purge is a DELETE of the queue's rows: ``ack`` or ``admin``. Redrive deletes from
  the dead-letter queue and sends to the target: ``ack`` (or ``admin``) on the one,
  ``send`` (or ``admin``) on the other; a token without ``send`` on every queue must
  name the target (``to``), which is otherwise looked up after authorization.

The file stores each token's SHA-256, never the token: a call's token is hashed
and looked up by its digest (no string comparison of secrets, so no timing leak
about them). Every check is one dict lookup and one set membership test on
objects built once at startup; the guarded handler of each method is built
once. The servicers are untouched: the interceptor checks each request after
its deserialization, before the servicer sees it, so a refused call has done
nothing (a refused Receive has leased nothing). The one exception is a Spanner
statement, which only its database's parser can read: it is checked where the
executor parses it, before anything runs (spanner/access.py, ``authorize``),
against the call's PRINCIPAL.
"""

import contextvars
import dataclasses
import hashlib
import json
import logging
import operator
import re
import secrets
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import grpc

from ..ground import errors, identifiers
from ..ground.clock import Clock
from . import status
from .interceptors import CALLER, Handler, HandlerWrapper, behaviour_of, guarded

logger = logging.getLogger(__name__)

PRIVILEGES = ("send", "receive", "ack", "select", "update", "admin")
EVERY_QUEUE = "*"
"""The grant key for every queue, those created later included."""
OPEN_SERVICES = frozenset({
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
})
"""Served to anyone: load balancers' health checks, and grpcurl's schema discovery."""
TOKEN_PREFIX = "spanq_"

REFUSAL_LOG_INTERVAL = 60.0
"""Seconds: at most one log line per (token, method, refusal) in this long. The next line
after it says how many refusals it left out, so a client hammering with a bad token
costs the log one line a minute per method."""

HOW_TO_SEND = ("send call metadata 'authorization: Bearer <token>' (the SDK: Client(target, token=...); "
               "grpcurl: -H 'authorization: Bearer <token>')")

PRINCIPAL: contextvars.ContextVar["Principal | None"] = contextvars.ContextVar("spanq_principal", default=None)
"""The token a call authenticated with, for a check made later in the call (a Spanner
statement's, once parsed); None when the server has no token file. Set for every call
the Authorizer admits, whatever its rule."""

After = Callable[[Any], None]
"""Edits a response for the caller (ListQueues: leaves out queues it may not see)."""


class AuthFileError(ValueError):
    """The token file is unreadable or invalid; the server does not start."""


# -- principals and the token file ------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Principal:
    """One token of the file: its name and what it may do."""

    name: str
    grants: dict[str, frozenset[str]]
    """Queue -> its privileges, each set already including the "*" grant's."""
    everywhere: frozenset[str]
    """The "*" grant: the privileges on every other queue."""

    def privileges(self, queue: str) -> frozenset[str]:
        return self.grants.get(queue, self.everywhere)

    def require(self, privilege: str, queue: str, what: str, where: str = "", **metadata: str) -> None:
        if privilege not in self.grants.get(queue, self.everywhere):
            raise self.denied(privilege, queue, what, where, **metadata)

    def denied(self, privilege: str, queue: str, what: str, where: str = "",
               **metadata: str) -> errors.PermissionDenied:
        on, key = ("every queue ('*')", '"*"') if queue == EVERY_QUEUE else (f"queue {identifiers.shown(queue)}", queue)
        return errors.PermissionDenied(
            f"{where}token {self.name!r} lacks the {privilege!r} privilege on {on}, which {what} needs; "
            f"grant it in the server's token file ([tokens.{self.name}] grants = {{ {key} = [\"{privilege}\"] }}) "
            "or use a token that has it",
            token=self.name, privilege=privilege, queue=queue, **metadata,
        )


@dataclasses.dataclass(frozen=True)
class Tokens:
    """The token file, loaded: principals by the SHA-256 digest of their token."""

    by_digest: dict[bytes, Principal]

    def authenticate(self, metadata: Iterable[tuple[str, Any]] | None) -> Principal:
        for key, value in metadata or ():
            if key == "authorization":
                break
        else:
            raise errors.Unauthenticated(f"this server requires a bearer token: {HOW_TO_SEND}")
        scheme, _, token = str(value).partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise errors.Unauthenticated(f"the authorization metadata is not 'Bearer <token>': {HOW_TO_SEND}")
        principal = self.by_digest.get(hashlib.sha256(token.encode()).digest())
        if principal is None:
            raise errors.Unauthenticated(
                "the bearer token is not one this server knows: check it, or have its sha256 added to the "
                "server's token file (--auth-file)"
            )
        return principal


def digest(token: str) -> str:
    """The hex SHA-256 of a token: what the token file stores."""
    return hashlib.sha256(token.encode()).hexdigest()


def mint(name: str = "NAME") -> str:
    """A fresh random token and the token file entry for it (``spanq token``)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return (f"# the token (give it to the client; the file keeps only its digest):\n# {token}\n"
            f"[tokens.{name}]\nsha256 = \"{digest(token)}\"\n"
            f"grants = {{ }}  # e.g. {{ invoices = [\"receive\", \"ack\"] }}\n")


def load(path: str) -> Tokens:
    try:
        with open(path, "rb") as f:
            text = f.read().decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthFileError(f"cannot read the token file {path}: {exc}") from None
    return parse(text, path)


def parse(text: str, source: str = "the token file") -> Tokens:
    """Validates the whole file strictly: any mistake refuses it, naming what is wrong where."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AuthFileError(f"{source} is not valid TOML: {exc}") from None
    extra = sorted(set(data) - {"tokens"})
    if extra:
        raise AuthFileError(f"{source}: unknown top-level key(s) {extra}; the file holds [tokens.<name>] tables only")
    tokens = data.get("tokens")
    if not isinstance(tokens, dict) or not tokens:
        raise AuthFileError(f"{source} defines no tokens: add [tokens.<name>] tables (spanq token mints one); "
                            "without a token file, authentication is off")
    by_digest: dict[bytes, Principal] = {}
    names: dict[bytes, str] = {}
    for name, entry in tokens.items():
        where = f"{source}: [tokens.{name}]"
        if not isinstance(entry, dict):
            raise AuthFileError(f"{where} must be a table with sha256 and grants")
        extra = sorted(set(entry) - {"sha256", "grants"})
        if extra:
            raise AuthFileError(f"{where}: unknown key(s) {extra}; a token has sha256 and grants only")
        hex_digest = entry.get("sha256")
        if not isinstance(hex_digest, str) or len(hex_digest) != 64:
            raise AuthFileError(f"{where}: sha256 must be the 64 hex digits of the token's SHA-256 "
                                "(spanq token prints one)")
        try:
            key = bytes.fromhex(hex_digest)
        except ValueError:
            raise AuthFileError(f"{where}: sha256 {hex_digest!r} is not hexadecimal") from None
        if key in names:
            raise AuthFileError(f"{where}: the same sha256 as [tokens.{names[key]}]; "
                                "each token must be distinct (mint another one)")
        names[key] = name
        by_digest[key] = _principal(name, entry.get("grants"), where)
    return Tokens(by_digest)


def _principal(name: str, grants: Any, where: str) -> Principal:
    if not isinstance(grants, dict) or not grants:
        raise AuthFileError(f"{where}: grants must be a table of queue = [privileges], e.g. "
                            f"grants = {{ invoices = [\"receive\", \"ack\"] }}; use \"*\" for every queue")
    parsed: dict[str, frozenset[str]] = {}
    for queue, privileges in grants.items():
        if queue != EVERY_QUEUE and not (identifiers.IDENTIFIER.match(queue) and len(queue) <= identifiers.MAX_QUEUE_NAME):
            raise AuthFileError(f"{where}: {queue!r} is not a queue name (lowercase letters, digits and _, "
                                f"starting with a letter, at most {identifiers.MAX_QUEUE_NAME}) nor \"*\"")
        if not isinstance(privileges, list) or not privileges:
            raise AuthFileError(f"{where}: the grant on {queue!r} must be a non-empty list of privileges, "
                                f"from {list(PRIVILEGES)}")
        unknown = [p for p in privileges if p not in PRIVILEGES]
        if unknown:
            raise AuthFileError(f"{where}: unknown privilege(s) {unknown} on {queue!r}; "
                                f"the privileges are {list(PRIVILEGES)}")
        parsed[queue] = frozenset(privileges)
    everywhere = parsed.pop(EVERY_QUEUE, frozenset())
    return Principal(name, {q: p | everywhere for q, p in parsed.items()}, everywhere)


# -- the generic check ---------------------------------------------------------------

Rule = Callable[[Principal, Any], After | None]
"""What one method needs: raises PermissionDenied when the principal may not make this
request; may return an edit of the response. Each front-end exports its methods' rules
(access.py for spanq.v1, spanner/access.py for Spanner's services); the server hands
them all to the Authorizer."""


@dataclasses.dataclass(frozen=True)
class StreamRule:
    """The rule of a method that takes a stream of requests (spanq.v1's StreamingReceive):
    ``check(principal, request, first)`` for each request as the servicer reads it,
    ``first`` the stream's first request (None while that is the one checked), so that a
    later request may name nothing the first did not. A refusal ends the call with its
    PERMISSION_DENIED, before the servicer sees the request."""

    check: Callable[[Principal, Any, Any], None]


def any_token(p: Principal, request: Any) -> None:
    """The rule of a method that touches no queue (sessions, transactions, bookkeeping):
    a valid token and no privilege. Listed by name, so that a method is never let
    through for lack of a rule."""


def one(privilege: str, field: str, what: str) -> Rule:
    """The rule of a method that needs ``privilege`` on the queue named by ``field``."""
    queue_of = operator.attrgetter(field)

    def rule(p: Principal, request: Any) -> None:
        queue = queue_of(request)
        if privilege not in p.grants.get(queue, p.everywhere):
            raise p.denied(privilege, queue, what)

    return rule


def require_parent(p: Principal, queue: str, parent: str | None, what: str, where: str = "") -> None:
    """admin on a parent table (a queue or the application's table, by its grant key):
    a child queue is DDL on its parent. Its sends answer whether a key is in the parent
    (NOT_FOUND or OK), the parent's deletes and acks cascade into it, and the parent
    cannot be dropped while it exists: only the parent's owner may attach one."""
    if parent and "admin" not in p.grants.get(parent, p.everywhere):
        raise p.denied("admin", parent, f"{what} of {queue!r}, whose parent table it is,", where)


def unruled(method: str) -> Rule:
    """The rule of a served method that no front-end gave one: nobody may call it (fail
    closed: a method added without its rule is refused, never open to every token)."""

    def rule(p: Principal, request: Any) -> None:
        raise errors.PermissionDenied(
            f"the server has no authorization rule for {method}, so it refuses every token's call to it; "
            "this is a bug of the server: report it", token=p.name, method=method)

    return rule


# -- the interceptor --------------------------------------------------------------------


_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.:/*@\[\]-]+\Z")


def _logfmt(value: str) -> str:
    """A value for a key=value log line: as is when plain, else JSON-quoted."""
    return value if _PLAIN_VALUE.match(value) else json.dumps(value)


class RefusalLog:
    """Logs refused calls at WARNING, one line per (token name, method, status) per
    REFUSAL_LOG_INTERVAL of the server's clock; the next line counts those left out.
    Never logs a token, only its name from the token file ("-" when the call has no
    known token). The keys are bounded: the file's names (and "-"), the served methods,
    two codes."""

    def __init__(self, clock: Clock | None = None, interval: float = REFUSAL_LOG_INTERVAL) -> None:
        self._clock = clock or Clock()
        self._interval = interval
        self._seen: dict[tuple[str, str, str], list[float]] = {}
        """key -> [when its last line was logged, refusals left out since]."""

    def _seconds(self) -> float:
        now = self._clock.now()  # the real Clock answers None (the database's): monotonic time then
        return time.monotonic() if now is None else now.timestamp()

    def __call__(self, method: str, error: errors.QueueError, peer: str) -> None:
        code = status.code_and_reason(error)[0].name
        token = error.metadata.get("token", "-")
        key = (token, method, code)
        now = self._seconds()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self._interval:
            seen[1] += 1
            return
        suppressed = int(seen[1]) if seen is not None else 0
        self._seen[key] = [now, 0]
        fields = {"code": code, "method": method, "token": token,
                  "privilege": error.metadata.get("privilege", "-"), "queue": error.metadata.get("queue", "-"),
                  "peer": peer or "-", "suppressed": suppressed}
        logger.warning("refused a call: " + " ".join(f"{k}={_logfmt(str(v))}" for k, v in fields.items()),
                       extra={"spanq_refusal": fields})


class Authorizer(HandlerWrapper):
    """Authenticates every call (but health and reflection) and applies its method's rule,
    from ``rules`` (each front-end's, see Rule). Fails closed: a served method without a
    rule is PERMISSION_DENIED for every token. The guarded handler is built once per
    method. Refusals are logged through a RefusalLog (rate-limited)."""

    def __init__(self, tokens: Tokens, rules: Mapping[str, "Rule | StreamRule"], clock: Clock | None = None) -> None:
        super().__init__()
        self._tokens = tokens
        self._rules = dict(rules)
        self._log_refusal = RefusalLog(clock)

    def rule(self, method: str, kind: str = "unary_unary") -> Rule:
        """The rule a call of ``method`` ("package.Service/Method") is checked with."""
        rule = self._rules.get(method)
        if rule is None or isinstance(rule, StreamRule):  # (a StreamRule only checks a stream of requests)
            return unruled(method)
        if not kind.startswith("unary_") and rule is not any_token:
            # A stream of requests cannot be checked before it is read: only a method that
            # needs no privilege, or has a StreamRule (wrap), may take one.
            return unruled(method)
        return rule

    def wrap(self, method: str, handler: Handler) -> Handler:
        if method.rpartition("/")[0] in OPEN_SERVICES:
            return handler
        found = behaviour_of(handler)
        if found is None:
            return handler  # nothing to call
        kind, behaviour = found
        stream_rule = self._rules.get(method)
        if kind == "stream_stream" and isinstance(stream_rule, StreamRule):
            return handler._replace(stream_stream=self._checked_requests(method, behaviour, stream_rule))  # type: ignore[attr-defined, no-any-return]
        rule = self.rule(method, kind)
        authenticate = self._tokens.authenticate
        log_refusal = self._log_refusal

        async def admit(request: Any, context: grpc.aio.ServicerContext) -> After | None:
            try:
                principal = authenticate(context.invocation_metadata())
                CALLER.set(principal.name)  # for what binds to its caller (Spanner transactions)
                PRINCIPAL.set(principal)  # for what is checked later in the call (Spanner statements)
                return rule(principal, request)
            except errors.QueueError as exc:
                log_refusal(method, exc, context.peer())
                await status.abort(context, exc)

        wrapped = guarded(behaviour, admit)
        if wrapped is not None:
            return handler._replace(**{kind: wrapped})  # type: ignore[attr-defined, no-any-return]
        raise TypeError(f"{method}: a synchronous handler cannot be guarded; spanq's servicers are asyncio")

    def _checked_requests(self, method: str, behaviour: Any, rule: StreamRule) -> Any:
        """A stream-stream behaviour whose call is authenticated as it opens and whose every
        request is checked by ``rule`` as the servicer reads it."""
        authenticate = self._tokens.authenticate
        log_refusal = self._log_refusal

        async def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            try:
                principal = authenticate(context.invocation_metadata())
            except errors.QueueError as exc:
                log_refusal(method, exc, context.peer())
                await status.abort(context, exc)
            CALLER.set(principal.name)
            PRINCIPAL.set(principal)

            async def read() -> AsyncIterator[Any]:
                first = None
                async for request in requests:
                    try:
                        rule.check(principal, request, first)
                    except errors.QueueError as exc:
                        log_refusal(method, exc, context.peer())
                        raise  # the servicer's error translation ends the call with it
                    if first is None:
                        first = request
                    yield request

            return await behaviour(read(), context)

        return checked
