"""Bearer tokens and per-queue privileges (--auth-file): a real server with a token
file, over a real socket, through raw stubs with metadata, the SDK and the official
Spanner client; and the token file's validation."""

import asyncio
import collections
import dataclasses
import logging
import re
from datetime import timedelta
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import spanq
import spanq.aio
from google.protobuf import timestamp_pb2

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.edge import auth
from spanq_server import cli
from spanq_server.ground import errors as spanq_server_errors
from spanq_server.ground.config import Config
from spanq_server.server import start

from ..helpers import duration, error_of, key, spanner_ddl, text_message, value

OPS, WORKER, SENDER, READER = "tok-ops", "tok-worker", "tok-sender", "tok-reader"
SPANNER_WORKER = "tok-spanner-worker"
DLQ_SENDER, DLQ_ADMIN = "tok-dlq-sender", "tok-dlq-admin"
REDRIVER = "tok-redriver"
TABLE_WRITER = "tok-table-writer"
ALICE, CAROL, DANA, ERIN = "tok-alice", "tok-carol", "tok-dana", "tok-erin"
"""alice owns queue qa; carol owns qc alone; dana owns qc and may read qa; erin owns qc and the table users."""
ONLY = {p: f"tok-only-{p}" for p in auth.PRIVILEGES}
"""A token per privilege, each granting just that one on queue q."""

TOKEN_FILE = f"""
[tokens.ops]
sha256 = "{auth.digest(OPS)}"
grants = {{ "*" = ["admin", "select", "send", "receive", "ack"] }}

[tokens.billing-worker]
sha256 = "{auth.digest(WORKER).upper()}"
grants = {{ invoices = ["receive", "ack"], emails = ["send"] }}

[tokens.sender]
sha256 = "{auth.digest(SENDER)}"
grants = {{ invoices = ["send"] }}

[tokens.spanner-worker]
sha256 = "{auth.digest(SPANNER_WORKER)}"
grants = {{ usertasks = ["send", "receive", "ack"] }}

[tokens.dlq-sender]
sha256 = "{auth.digest(DLQ_SENDER)}"
grants = {{ q = ["admin"], dlq = ["send"] }}

[tokens.dlq-admin]
sha256 = "{auth.digest(DLQ_ADMIN)}"
grants = {{ q = ["admin"], dlq = ["admin"] }}

[tokens.alice]
sha256 = "{auth.digest(ALICE)}"
grants = {{ qa = ["admin", "send", "receive", "ack", "select"] }}

[tokens.carol]
sha256 = "{auth.digest(CAROL)}"
grants = {{ qc = ["admin", "send", "receive", "ack", "select"] }}

[tokens.dana]
sha256 = "{auth.digest(DANA)}"
grants = {{ qc = ["admin", "send"], qa = ["select", "send", "receive", "ack"] }}

[tokens.erin]
sha256 = "{auth.digest(ERIN)}"
grants = {{ qc = ["admin", "send"], users = ["admin"] }}

[tokens.redriver]
sha256 = "{auth.digest(REDRIVER)}"
grants = {{ dlq = ["ack"], q = ["send"] }}

[tokens.table-writer]
sha256 = "{auth.digest(TABLE_WRITER)}"
grants = {{ users = ["select", "send"], usertasks = ["ack"] }}

[tokens.reader]
sha256 = "{auth.digest(READER)}"
grants = {{ "*" = ["select"] }}
""" + "".join(f"""
[tokens.only-{p}]
sha256 = "{auth.digest(t)}"
grants = {{ q = ["{p}"] }}
""" for p, t in ONLY.items())


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
def server_config(server_config: Config, tmp_path: Any) -> Config:
    path = tmp_path / "tokens.toml"
    path.write_text(TOKEN_FILE)
    return dataclasses.replace(server_config, auth_file=str(path))


async def make_queue(stub: Any, name: str) -> None:
    await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name=name, payload_type=queue_pb2.STRING,
                                                                              key_columns=[queue_pb2.KeyColumn(
                                                                                  name="id", type=queue_pb2.STRING)])),
                           metadata=bearer(OPS))


async def read_stream(call: Any) -> list[Any]:
    return [m async for r in call for m in r.messages]


# -- authentication ----------------------------------------------------------------------


@pytest.mark.parametrize("metadata, message", [
    ((), "requires a bearer token"),
    ((("authorization", "Basic b3BzOm9wcw=="),), "not 'Bearer <token>'"),
    ((("authorization", "Bearer "),), "not 'Bearer <token>'"),
    (bearer("tok-nobody"), "not one this server knows"),
    (bearer(OPS.upper()), "not one this server knows"),
])
async def test_without_a_known_token_every_call_is_unauthenticated(stub, metadata, message) -> None:
    for call in (lambda: stub.ListQueues(queue_pb2.ListQueuesRequest(), metadata=metadata),
                 lambda: stub.GetQueue(queue_pb2.GetQueueRequest(name="q"), metadata=metadata),
                 lambda: read_stream(stub.Receive(queue_pb2.ReceiveRequest(queue="q"), metadata=metadata))):
        code, text, info = await error_of(call())
        assert code == grpc.StatusCode.UNAUTHENTICATED and message in text and "bearer" in text.lower()
        assert info["reason"] == "UNAUTHENTICATED"


def refusals(caplog: Any) -> list[str]:
    """The refusal lines the server logged, without their "refused a call: " lead."""
    return [r.getMessage().removeprefix("refused a call: ") for r in caplog.records
            if r.name == "spanq_server.edge.auth" and r.levelno == logging.WARNING]


async def test_refusals_are_logged_once_per_token_method_and_code_per_interval(stub, clock, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="spanq_server.edge.auth")
    await make_queue(stub, "emails")
    bad = "tok-a-secret-nobody-has"
    for _ in range(5):  # a client hammering with a bad token
        code, _, _ = await error_of(stub.ListQueues(queue_pb2.ListQueuesRequest(), metadata=bearer(bad)))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    await error_of(stub.GetQueue(queue_pb2.GetQueueRequest(name="emails")))  # another method, no token at all
    for _ in range(3):
        code, _, _ = await error_of(stub.Send(queue_pb2.SendRequest(
            queue="emails", messages=[text_message("e", "x")]), metadata=bearer(SENDER)))
        assert code == grpc.StatusCode.PERMISSION_DENIED
    lines = refusals(caplog)
    assert [line.rsplit(" peer=", 1)[0] for line in lines] == [
        "code=UNAUTHENTICATED method=spanq.v1.QueueService/ListQueues token=- privilege=- queue=-",
        "code=UNAUTHENTICATED method=spanq.v1.QueueService/GetQueue token=- privilege=- queue=-",
        "code=PERMISSION_DENIED method=spanq.v1.QueueService/Send token=sender privilege=send queue=emails",
    ]
    assert all(re.search(r" peer=ipv4:127\.0\.0\.1:\d+ suppressed=0$", line) for line in lines), lines
    record = next(r for r in caplog.records if "PERMISSION_DENIED" in r.getMessage())
    assert record.spanq_refusal["token"] == "sender" and record.spanq_refusal["queue"] == "emails"

    # A refusal after the interval is logged again, with the count of those left out.
    caplog.clear()
    clock.advance(timedelta(seconds=auth.REFUSAL_LOG_INTERVAL + 1))
    await error_of(stub.ListQueues(queue_pb2.ListQueuesRequest(), metadata=bearer(bad)))
    await error_of(stub.Send(queue_pb2.SendRequest(queue="emails", messages=[text_message("e", "x")]),
                             metadata=bearer(SENDER)))
    lines = refusals(caplog)
    assert len(lines) == 2 and "token=- " in lines[0] and "token=sender " in lines[1]
    assert lines[0].endswith(" suppressed=4") and lines[1].endswith(" suppressed=2"), lines
    # Never the token itself, nor its digest.
    assert not any(secret in r.getMessage() for r in caplog.records for secret in
                   (bad, SENDER, auth.digest(bad), auth.digest(SENDER)))


def test_a_token_name_that_is_not_plain_is_quoted_in_the_log(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="spanq_server.edge.auth")
    log = auth.RefusalLog()
    log("spanq.v1.QueueService/Send", spanq_server_errors.PermissionDenied("no", token="a b=c", privilege="send",
                                                                             queue="q"), "")
    [line] = refusals(caplog)
    assert 'token="a b=c" ' in line and line.endswith(" peer=- suppressed=0")


async def test_health_and_reflection_need_no_token(server, channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service="spanq.v1.QueueService"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    async for response in call:
        names = [s.name for s in response.list_services_response.service]
        assert "spanq.v1.QueueService" in names
        break
    call.cancel()


# -- every served method has a rule (the authorizer fails closed) ----------------------


async def served_methods(config: Config, monkeypatch: Any) -> set[str]:
    """Every method a real server serves ("package.Service/Method"): what start() hands
    gRPC, recorded as it registers it (spanq.v1, the Spanner services, health, reflection,
    and whatever is added later)."""
    found: set[str] = set()
    unlisted: list[Any] = []
    plain_generic = grpc.aio._server.Server.add_generic_rpc_handlers
    plain_registered = grpc.aio._server.Server.add_registered_method_handlers

    def add_generic(self: Any, handlers: Any) -> None:
        for handler in handlers:
            methods = getattr(handler, "_method_handlers", None)  # grpc's DictionaryGenericHandler
            if methods is None:
                unlisted.append(handler)
            else:
                found.update(m.lstrip("/") for m in methods)
        plain_generic(self, handlers)

    def add_registered(self: Any, service: str, handlers: dict[str, Any]) -> None:
        found.update(f"{service}/{m}" for m in handlers)
        plain_registered(self, service, handlers)

    monkeypatch.setattr(grpc.aio._server.Server, "add_generic_rpc_handlers", add_generic)
    monkeypatch.setattr(grpc.aio._server.Server, "add_registered_method_handlers", add_registered)
    running = await start(config)
    await running.stop(0)
    monkeypatch.undo()
    assert not unlisted, f"handlers whose methods this test cannot list: {unlisted}; list them here"
    return found


async def test_every_method_served_has_a_rule_or_is_listed_as_open(server_config, monkeypatch) -> None:
    from spanq_server.v1 import access
    from spanq_server.server import authorization_rules

    methods = await served_methods(server_config, monkeypatch)
    services = {m.rpartition("/")[0] for m in methods}
    assert {access.QUEUE_SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services
    assert f"{access.QUEUE_SERVICE}/Redrive" in methods and f"{access.QUEUE_SERVICE}/Purge" in methods
    rules = authorization_rules()
    unruled = sorted(m for m in methods if m not in rules and m.rpartition("/")[0] not in auth.OPEN_SERVICES)
    assert not unruled, (f"served without an authorization rule (every call is refused): {unruled}; give each "
                         "a rule in its front-end's access module, or auth.any_token if it touches no queue")
    if any(s.startswith("google.spanner") for s in services):  # (google-cloud-spanner installed)
        stale = sorted(set(rules) - methods)
        assert not stale, f"rules for methods the server does not serve (misspelled?): {stale}"
        assert rules["google.spanner.v1.Spanner/CreateSession"] is auth.any_token
    assert all(rules[m] is not auth.any_token for m in methods if m.startswith(access.QUEUE_SERVICE + "/"))


async def test_a_method_without_a_rule_is_refused_to_every_token(server_config, monkeypatch, caplog) -> None:
    from spanq_server.v1 import access

    caplog.set_level(logging.WARNING, logger="spanq_server.edge.auth")
    monkeypatch.delitem(access.RULES, f"{access.QUEUE_SERVICE}/GetQueue")
    running = await start(server_config)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await make_queue(stub, "q")
            for token in (OPS, ONLY["admin"]):  # "*" with every privilege, and admin on q itself
                code, text, info = await error_of(stub.GetQueue(queue_pb2.GetQueueRequest(name="q"),
                                                                metadata=bearer(token)))
                assert code == grpc.StatusCode.PERMISSION_DENIED, text
                assert "no authorization rule for spanq.v1.QueueService/GetQueue" in text
                assert info["reason"] == "PERMISSION_DENIED"
            code, _, _ = await error_of(stub.GetQueue(queue_pb2.GetQueueRequest(name="q")))
            assert code == grpc.StatusCode.UNAUTHENTICATED  # without a token: authentication first
            assert (await stub.ListQueues(queue_pb2.ListQueuesRequest(), metadata=bearer(OPS))).queues  # others work
    finally:
        await running.stop(0)
    assert any("method=spanq.v1.QueueService/GetQueue token=ops" in line for line in refusals(caplog))


def test_the_authorizer_fails_closed_for_a_method_it_has_no_rule_for() -> None:
    from spanq_server.v1 import access

    authorizer = auth.Authorizer(auth.parse(TOKEN_FILE), access.RULES)
    ops = auth.parse(TOKEN_FILE).authenticate(bearer(OPS))
    with pytest.raises(spanq_server_errors.PermissionDenied, match="no authorization rule for x.v1.New/Method"):
        authorizer.rule("x.v1.New/Method")(ops, None)
    # A stream of requests cannot be checked before it is read: only a method that needs no privilege takes one.
    with pytest.raises(spanq_server_errors.PermissionDenied, match="no authorization rule"):
        authorizer.rule(f"{access.QUEUE_SERVICE}/Send", "stream_unary")(ops, None)
    assert authorizer.rule(f"{access.QUEUE_SERVICE}/Send") is access.RULES[f"{access.QUEUE_SERVICE}/Send"]


def test_a_spanner_parse_error_is_raised_fresh_each_time() -> None:
    from spanq_server.spanner.query import parser

    # The parse is cached; its error is not: a caller's "statement 3: ..." does not stick to the next one.
    with pytest.raises(spanq_server_errors.InvalidArgument) as first:
        parser.parse_queue("SELEKT 1")
    first.value.args = ("statement 3: " + first.value.message,)
    with pytest.raises(spanq_server_errors.InvalidArgument) as again:
        parser.parse_queue("SELEKT 1")
    assert not again.value.message.startswith("statement 3")


def test_a_spanner_statement_without_a_privilege_is_refused(monkeypatch) -> None:
    from spanq_server.spanner.query import ast, parser
    from spanq_server.spanner.handlers.access import STATEMENT_PRIVILEGE, check

    monkeypatch.delitem(STATEMENT_PRIVILEGE, ast.QueueSelect)  # as a new kind of statement would be
    ops = auth.parse(TOKEN_FILE).authenticate(bearer(OPS))
    with pytest.raises(spanq_server_errors.PermissionDenied, match="no authorization rule for a Select statement"):
        check(ops, parser.parse_queue("SELECT * FROM UserTasks"))
    # So is a new kind of the table subset's, which table_access has no rule for.
    monkeypatch.setattr(ast, "Merge", dataclasses.make_dataclass("Merge", [("table", str)]), raising=False)
    with pytest.raises(spanq_server_errors.PermissionDenied, match="no authorization rule for a Merge statement"):
        check(ops, ast.Merge("users"))  # type: ignore[attr-defined]


# -- each RPC and its privilege ----------------------------------------------------------


def _rpc_cases() -> dict[str, tuple[set[str], Any]]:
    """RPC -> (the privileges that allow it, a call on queue q that succeeds when allowed)."""
    mutation = queue_pb2.Mutation
    return {
        "GetQueue": (set(auth.PRIVILEGES), lambda s, m: s.GetQueue(queue_pb2.GetQueueRequest(name="q"), metadata=m)),
        "Send": ({"send"}, lambda s, m: s.Send(queue_pb2.SendRequest(queue="q", messages=[text_message("k", "x")]),
                                               metadata=m)),
        "Receive": ({"receive"}, lambda s, m: read_stream(s.Receive(queue_pb2.ReceiveRequest(
            queue="q", max_duration=duration(0.05)), metadata=m))),
        "RenewLease": ({"receive"}, lambda s, m: s.RenewLease(queue_pb2.RenewLeaseRequest(
            queue="q", lease_tokens=["unknown"], lease_duration=duration(10)), metadata=m)),
        "RenewLease(nack)": ({"receive"}, lambda s, m: s.RenewLease(queue_pb2.RenewLeaseRequest(
            queue="q", lease_tokens=["unknown"], lease_duration=duration(0)), metadata=m)),
        "Ack": ({"ack"}, lambda s, m: s.Ack(queue_pb2.AckRequest(
            queue="q", acks=[queue_pb2.AckMessage(key=key("none"))], ignore_not_found=True), metadata=m)),
        "Commit(send)": ({"send"}, lambda s, m: s.Commit(queue_pb2.CommitRequest(mutations=[mutation(
            send=queue_pb2.SendRequest(queue="q", messages=[text_message("c", "x")]))]), metadata=m)),
        "Commit(ack)": ({"ack"}, lambda s, m: s.Commit(queue_pb2.CommitRequest(mutations=[mutation(
            ack=queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key("none"))],
                                     ignore_not_found=True))]), metadata=m)),
        "Commit(renew_lease)": ({"receive"}, lambda s, m: s.Commit(queue_pb2.CommitRequest(mutations=[mutation(
            renew_lease=queue_pb2.RenewLeaseRequest(queue="q", lease_tokens=["unknown"],
                                                    lease_duration=duration(0)))]), metadata=m)),
        "GetQueueStats": ({"select"}, lambda s, m: s.GetQueueStats(queue_pb2.GetQueueStatsRequest(name="q"),
                                                                    metadata=m)),
        "Peek": ({"select"}, lambda s, m: s.Peek(queue_pb2.PeekRequest(queue="q"), metadata=m)),
        # sent_before the epoch: purges nothing, so the sends above stay
        "Purge": ({"ack", "admin"}, lambda s, m: s.Purge(queue_pb2.PurgeRequest(
            queue="q", sent_before=timestamp_pb2.Timestamp(seconds=1)), metadata=m)),
        "CreateQueue": ({"admin"}, None),  # below: it needs a queue name the token is granted on
        "DropQueue": ({"admin"}, None),
    }


async def test_each_rpc_needs_its_privilege_on_its_queue(stub, sql) -> None:
    await make_queue(stub, "q")
    seen: dict[tuple[str, str], grpc.StatusCode] = {}
    for rpc, (allowed, call) in _rpc_cases().items():
        if call is None:
            continue
        for privilege, token in ONLY.items():
            try:
                await call(stub, bearer(token))
                seen[rpc, privilege] = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as exc:
                seen[rpc, privilege] = exc.code()
                if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
                    text = exc.details() or ""
                    assert f"'only-{privilege}'" in text and "queue 'q'" in text, text
                    assert rpc == "GetQueue" or f"lacks the {sorted(allowed)[0]!r} privilege" in text, text
    expected = {(rpc, p): grpc.StatusCode.OK if p in allowed else grpc.StatusCode.PERMISSION_DENIED
                for rpc, (allowed, call) in _rpc_cases().items() if call is not None for p in ONLY}
    assert seen == expected
    # Only the allowed sends stored anything: Send's k and the Commit's c.
    assert sorted(r[0] for r in sql.execute("SELECT id FROM q")) == ["c", "k"]

    # CreateQueue and DropQueue need admin on the very queue.
    for privilege, token in ONLY.items():
        if privilege != "admin":
            code, text, info = await error_of(stub.DropQueue(queue_pb2.DropQueueRequest(name="q"),
                                                             metadata=bearer(token)))
            assert code == grpc.StatusCode.PERMISSION_DENIED and "DropQueue" in text, text
            assert info == {"reason": "PERMISSION_DENIED", "token": f"only-{privilege}", "privilege": "admin",
                            "queue": "q"}
    code, text, _ = await error_of(stub.CreateQueue(queue_pb2.CreateQueueRequest(
        queue=queue_pb2.Queue(name="other")), metadata=bearer(ONLY["admin"])))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "queue 'other'" in text and "CreateQueue" in text
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="q"), metadata=bearer(ONLY["admin"]))
    new = queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name="q"))
    code, _, _ = await error_of(stub.CreateQueue(new, metadata=bearer(ONLY["send"])))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert (await stub.CreateQueue(new, metadata=bearer(ONLY["admin"]))).name == "q"


async def test_redrive_needs_ack_on_the_dead_letter_queue_and_send_on_its_target(stub) -> None:
    await make_queue(stub, "q")
    await make_queue(stub, "dlq")

    async def redrive(token: str, queue: str, to: str = "") -> list[Any]:
        return [p async for p in stub.Redrive(queue_pb2.RedriveRequest(queue=queue, to=to), metadata=bearer(token))]

    [done] = await redrive(REDRIVER, "dlq", "q")  # allowed (and nothing to move)
    assert done.done and done.moved == 0 and done.to == "q"
    code, text, _ = await error_of(redrive(REDRIVER, "dlq"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "must name the target queue" in text, text
    code, text, info = await error_of(redrive(ONLY["ack"], "q", "dlq"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and info["privilege"] == "send" and info["queue"] == "dlq", text
    code, text, info = await error_of(redrive(REDRIVER, "q", "dlq"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and info["privilege"] == "ack" and info["queue"] == "q", text
    # A token with send everywhere may leave the target to the server, which finds none here.
    code, text, _ = await error_of(redrive(OPS, "dlq"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no queue names it" in text, text


async def test_naming_a_dead_letter_queue_needs_send_or_admin_on_it(stub) -> None:
    """Else a token with admin on its own queue could route messages into any queue."""
    await make_queue(stub, "dlq")

    def create(token: str) -> Any:
        return stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
            name="q", payload_type=queue_pb2.STRING, key_columns=[queue_pb2.KeyColumn(name="id", type=queue_pb2.STRING)],
            max_delivery_attempts=3, dead_letter_queue="dlq")), metadata=bearer(token))

    code, text, info = await error_of(create(ONLY["admin"]))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert text.startswith("token 'only-admin' lacks the 'send' privilege on queue 'dlq', which CreateQueue of 'q'"), text
    assert info == {"reason": "PERMISSION_DENIED", "token": "only-admin", "privilege": "send", "queue": "dlq"}
    code, _, _ = await error_of(stub.GetQueue(queue_pb2.GetQueueRequest(name="q"), metadata=bearer(OPS)))
    assert code == grpc.StatusCode.NOT_FOUND  # nothing was created
    # Admin on the new queue is still needed, whatever the token may do on the dead-letter queue.
    code, text, info = await error_of(create(ONLY["send"]))
    assert code == grpc.StatusCode.PERMISSION_DENIED and info["privilege"] == "admin" and info["queue"] == "q"
    # send on the dead-letter queue, or admin there, is enough.
    assert (await create(DLQ_SENDER)).dead_letter_queue == "dlq"
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="q"), metadata=bearer(OPS))
    assert (await create(DLQ_ADMIN)).dead_letter_queue == "dlq"


async def test_update_queue_needs_admin_and_send_on_a_new_dead_letter_queue(stub) -> None:
    await make_queue(stub, "q")
    await make_queue(stub, "dlq")

    def update(token: str, *paths: str, **fields: Any) -> Any:
        request = queue_pb2.UpdateQueueRequest(queue=queue_pb2.Queue(name="q", **fields))
        request.update_mask.paths.extend(paths)
        return stub.UpdateQueue(request, metadata=bearer(token))

    for token in (ONLY["send"], ONLY["receive"], ONLY["select"]):
        code, text, info = await error_of(update(token, "disable_delivery", disable_delivery=True))
        assert code == grpc.StatusCode.PERMISSION_DENIED and info["privilege"] == "admin", text
    code, text, info = await error_of(update(ONLY["admin"], "max_delivery_attempts", "dead_letter_queue",
                                             max_delivery_attempts=3, dead_letter_queue="dlq"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and (info["privilege"], info["queue"]) == ("send", "dlq"), text
    got = await stub.GetQueue(queue_pb2.GetQueueRequest(name="q"), metadata=bearer(OPS))
    assert (got.disable_delivery, got.dead_letter_queue) == (False, "")  # nothing changed
    assert (await update(ONLY["admin"], "disable_delivery", disable_delivery=True)).disable_delivery
    assert (await update(DLQ_SENDER, "max_delivery_attempts", "dead_letter_queue", max_delivery_attempts=3,
                         dead_letter_queue="dlq")).dead_letter_queue == "dlq"


async def test_naming_a_parent_table_needs_admin_on_it(stub, channel, sql) -> None:
    """Else a token with admin on its own queue alone could interleave it in any queue or
    table: its sends would answer which keys the parent holds (NOT_FOUND or OK), the parent's
    acks would cascade into it, and the parent could not be dropped while it exists."""
    pytest.importorskip("google.cloud.spanner")
    await make_queue(stub, "qa")
    await make_queue(stub, "qc")
    await stub.Send(queue_pb2.SendRequest(queue="qa", messages=[text_message("present", "x")]),
                    metadata=bearer(ALICE))
    sql.execute("CREATE TABLE users (id text PRIMARY KEY)")
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="qc"), metadata=bearer(CAROL))

    def child(parent: str) -> queue_pb2.CreateQueueRequest:
        return queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
            name="qc", payload_type=queue_pb2.STRING, parent_table=parent,
            key_columns=[queue_pb2.KeyColumn(name="id", type=queue_pb2.STRING)]))

    # carol has no privilege on qa, dana may read it but does not own it: neither may name it.
    for token, name in ((CAROL, "carol"), (DANA, "dana")):
        code, text, info = await error_of(stub.CreateQueue(child("qa"), metadata=bearer(token)))
        assert code == grpc.StatusCode.PERMISSION_DENIED, text
        assert text.startswith(f"token {name!r} lacks the 'admin' privilege on queue 'qa', which CreateQueue of "
                               "'qc', whose parent table it is, needs"), text
        assert info == {"reason": "PERMISSION_DENIED", "token": name, "privilege": "admin", "queue": "qa"}
        ddl = ("CREATE QUEUE Qc (Id STRING(MAX) NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), "
               "INTERLEAVE IN PARENT Qa ON DELETE CASCADE")
        code, text, info = await error_of(spanner_ddl(channel, ddl, metadata=bearer(token)))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "statement 0: " in text, text
        assert info["privilege"] == "admin" and info["queue"] == "qa", info
    # The application's own table is named by its grant key: admin on it, as erin has.
    code, _, info = await error_of(stub.CreateQueue(child("users"), metadata=bearer(CAROL)))
    assert code == grpc.StatusCode.PERMISSION_DENIED and info["queue"] == "users"
    assert sql.execute("SELECT count(*) FROM spanq.queues WHERE name = 'qc'").fetchone() == (0,)
    assert (await stub.CreateQueue(child("users"), metadata=bearer(ERIN))).parent_table == "users"
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="qc"), metadata=bearer(ERIN))

    # A token that owns both may. Then the parent cannot be dropped while its child exists:
    # FAILED_PRECONDITION naming the child, and nothing changes.
    assert (await stub.CreateQueue(child("qa"), metadata=bearer(OPS))).parent_table == "qa"
    code, text, info = await error_of(stub.DropQueue(queue_pb2.DropQueueRequest(name="qa"), metadata=bearer(ALICE)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, text
    assert text.startswith("queue 'qa' is the parent table of queue(s) 'qc'") and "drop those queues first" in text
    assert info == {"reason": "FAILED_PRECONDITION", "queue": "qa", "child": "qc"}
    assert sql.execute("SELECT id FROM qa").fetchall() == [("present",)]
    # The same through the Spanner front-end.
    operation = await spanner_ddl(channel, "DROP QUEUE Qa", metadata=bearer(OPS))
    assert operation.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0], operation.error
    assert "parent table of queue(s) 'qc'" in operation.error.message
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="qc"), metadata=bearer(CAROL))
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="qa"), metadata=bearer(ALICE))


async def test_unknown_queue_without_privilege_is_denied_not_revealed(stub) -> None:
    """A token learns nothing of queues it has no privilege on: not even whether they exist."""
    await make_queue(stub, "secret")
    for name in ("secret", "nosuch"):
        code, _, _ = await error_of(stub.GetQueue(queue_pb2.GetQueueRequest(name=name), metadata=bearer(SENDER)))
        assert code == grpc.StatusCode.PERMISSION_DENIED
    code, _, _ = await error_of(stub.GetQueue(queue_pb2.GetQueueRequest(name="nosuch"), metadata=bearer(OPS)))
    assert code == grpc.StatusCode.NOT_FOUND


async def test_star_grants_cover_queues_created_later(stub) -> None:
    await make_queue(stub, "later")
    # reader has select on "*": it may read the queue's schema but not send to it.
    assert (await stub.GetQueue(queue_pb2.GetQueueRequest(name="later"), metadata=bearer(READER))).name == "later"
    code, text, _ = await error_of(stub.Send(queue_pb2.SendRequest(
        queue="later", messages=[text_message("a", "x")]), metadata=bearer(READER)))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "'send'" in text and "queue 'later'" in text
    await stub.Send(queue_pb2.SendRequest(queue="later", messages=[text_message("a", "x")]), metadata=bearer(OPS))


async def test_list_queues_shows_only_the_tokens_queues_and_pages_through(server, stub) -> None:
    names = ["aa", "emails", "invoices", "mm", "zz"]
    for name in names:
        await make_queue(stub, name)

    async def listed(token: str, page_size: int) -> tuple[list[str], int]:
        found, pages, page_token = [], 0, ""
        while True:
            page = await stub.ListQueues(queue_pb2.ListQueuesRequest(page_size=page_size, page_token=page_token),
                                         metadata=bearer(token))
            found += [q.name for q in page.queues]
            pages += 1
            page_token = page.next_page_token
            if not page_token:
                return found, pages

    assert await listed(OPS, 0) == (names, 1)
    assert await listed(READER, 2) == (names, 3)  # select on "*": every queue
    # A page is filtered after it is read: it may come back short, even empty, with a
    # next_page_token all the same; paging to the end finds every queue the token may see.
    found, pages = await listed(WORKER, 1)
    assert found == ["emails", "invoices"] and pages == 5
    first = await stub.ListQueues(queue_pb2.ListQueuesRequest(page_size=1), metadata=bearer(WORKER))
    assert list(first.queues) == [] and first.next_page_token
    assert await listed(SENDER, 0) == (["invoices"], 1)
    async with spanq.aio.Client(server.target, token=WORKER) as client:
        assert [q.name for q in await client.list_queues(page_size=1)] == ["emails", "invoices"]


# -- Commit and Receive: nothing happens before the check ------------------------------------


async def test_commit_with_one_forbidden_mutation_commits_nothing(stub, sql) -> None:
    await make_queue(stub, "emails")
    await make_queue(stub, "invoices")
    request = queue_pb2.CommitRequest(mutations=[
        queue_pb2.Mutation(send=queue_pb2.SendRequest(queue="emails", messages=[text_message("e1", "hi")])),
        queue_pb2.Mutation(ack=queue_pb2.AckRequest(queue="invoices", acks=[queue_pb2.AckMessage(key=key("i"))],
                                                    ignore_not_found=True)),
        queue_pb2.Mutation(send=queue_pb2.SendRequest(queue="invoices", messages=[text_message("i1", "x")])),
    ])
    code, text, info = await error_of(stub.Commit(request, metadata=bearer(WORKER)))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert text.startswith("mutation 2: token 'billing-worker' lacks the 'send' privilege on queue 'invoices'"), text
    assert info["mutation_index"] == "2" and info["privilege"] == "send" and info["queue"] == "invoices"
    assert sql.execute("SELECT count(*) FROM emails").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM invoices").fetchone() == (0,)
    # Without the forbidden mutation, the same token commits.
    del request.mutations[2]
    await stub.Commit(request, metadata=bearer(WORKER))
    assert sql.execute("SELECT id FROM emails").fetchall() == [("e1",)]


async def test_receive_without_the_privilege_is_refused_before_it_leases(stub) -> None:
    await make_queue(stub, "invoices")
    await stub.Send(queue_pb2.SendRequest(queue="invoices", messages=[text_message("i1", "x")]),
                    metadata=bearer(SENDER))
    code, text, _ = await error_of(read_stream(stub.Receive(queue_pb2.ReceiveRequest(
        queue="invoices", max_duration=duration(1)), metadata=bearer(SENDER))))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "'receive'" in text and "Receive" in text
    # Never leased: the worker gets it at once, on its first delivery attempt.
    [message] = await read_stream(stub.Receive(queue_pb2.ReceiveRequest(
        queue="invoices", max_batch_size=1, max_duration=duration(0.5)), metadata=bearer(WORKER)))
    assert message.delivery_attempt == 1 and message.payload == value("x")


# -- the SDK ----------------------------------------------------------------------------------


async def test_the_sdk_sends_its_token(server, stub) -> None:
    await make_queue(stub, "emails")
    await make_queue(stub, "invoices")
    async with spanq.aio.Client(server.target) as anonymous:
        with pytest.raises(spanq.Unauthenticated, match="bearer token"):
            await anonymous.get_queue("emails")
    async with spanq.aio.Client(server.target, token="wrong") as wrong:
        with pytest.raises(spanq.Unauthenticated, match="not one this server knows"):
            await wrong.send("emails", "x", key="a")
    async with spanq.aio.Client(server.target, token=WORKER) as worker, \
            spanq.aio.Client(server.target, token=SENDER) as sender:
        assert await worker.send("emails", "hello", key="e1") == ("e1",)
        with pytest.raises(spanq.PermissionDenied, match="lacks the 'send' privilege on queue 'invoices'") as denied:
            await worker.send("invoices", "x", key="i1")
        assert denied.value.metadata == {"token": "billing-worker", "privilege": "send", "queue": "invoices"}
        await sender.send("invoices", "bill", key="i1")
        [message] = await worker.receive("invoices", 1, timeout=2)
        await worker.renew_lease("invoices", message, lease_duration=timedelta(seconds=30))
        assert await worker.ack("invoices", message) == [True]
        with pytest.raises(spanq.PermissionDenied, match="'receive'"):
            await sender.receive("invoices", 1, timeout=0.5)
        with pytest.raises(spanq.PermissionDenied, match="mutation 0"):
            await sender.commit(spanq.Transaction().ack("invoices", "i1", ignore_not_found=True))
        with pytest.raises(spanq.PermissionDenied, match="'admin'"):
            await worker.drop_queue("invoices")


# -- the Spanner front-end ----------------------------------------------------------------------


_Details = collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                                               "compression"))


class _CallDetails(_Details, grpc.ClientCallDetails):
    pass


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the bearer token to the official client's calls: it sends none of its own
    with SPANNER_EMULATOR_HOST."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, d: Any) -> Any:
        return _CallDetails(d.method, d.timeout, [*(d.metadata or ()), self._header], d.credentials,
                            d.wait_for_ready, d.compression)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


def _spanner_client_on(server: Any, monkeypatch: Any) -> dict[str, str | None]:
    """Points the official client at ``server``; each channel it opens carries the bearer token
    that ``token["now"]`` holds then (OPS at first; None: no token)."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.target)
    token: dict[str, str | None] = {"now": OPS}
    plain = grpc.insecure_channel

    def channel(target: str, *args: Any, **kwargs: Any) -> grpc.Channel:
        made = plain(target, *args, **kwargs)
        return grpc.intercept_channel(made, _Bearer(token["now"])) if token["now"] else made

    monkeypatch.setattr(grpc, "insecure_channel", channel)
    return token


async def test_the_spanner_front_end_checks_the_same_privileges(server, monkeypatch, sql) -> None:
    pytest.importorskip("google.cloud.spanner")
    from google.api_core import exceptions
    from google.cloud import spanner

    from ..spanner.test_spanner_client import DATABASE, INSTANCE, PROJECT, b64, make_database

    token = _spanner_client_on(server, monkeypatch)
    await asyncio.to_thread(make_database, server.target)  # as ops: admin on "*"

    def database_as(who: str | None) -> Any:
        token["now"] = who
        return spanner.Client(project=PROJECT).instance(INSTANCE).database(DATABASE)

    def query(database: Any, text: str) -> list[Any]:
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql(text))

    def send(database: Any, queue: str = "UserTasks") -> None:
        with database.batch() as batch:
            batch.send(queue=queue, key=[1, "m"], payload=b64(b"x"))

    anonymous = await asyncio.to_thread(database_as, None)
    with pytest.raises(exceptions.Unauthenticated, match="bearer token"):
        await asyncio.to_thread(query, anonymous, "SELECT * FROM UserTasks")

    # A token with send, receive and ack on usertasks; no select, no admin.
    worker = await asyncio.to_thread(database_as, SPANNER_WORKER)
    await asyncio.to_thread(send, worker)
    rows = await asyncio.to_thread(query, worker, "SELECT * FROM RECEIVE_UserTasks(max_duration => '200ms')")
    assert [r[:2] for r in rows] == [[1, "m"]]
    with pytest.raises(exceptions.PermissionDenied, match="'select' privilege on queue 'usertasks'"):
        await asyncio.to_thread(query, worker, "SELECT * FROM UserTasks")
    with pytest.raises(exceptions.PermissionDenied, match="mutation 0: .*'send' privilege on queue 'other'"):
        await asyncio.to_thread(send, worker, "Other")

    def read(database: Any) -> list[Any]:
        with database.snapshot() as snapshot:
            return list(snapshot.read("UserTasks", ["UserId"], spanner.KeySet(all_=True)))

    def delete(database: Any, queue: str) -> None:
        with database.batch() as batch:
            batch.delete(queue, spanner.KeySet(keys=[[9, "none"]]))

    with pytest.raises(exceptions.PermissionDenied, match="'select' privilege on queue 'usertasks'"):
        await asyncio.to_thread(read, worker)
    with pytest.raises(exceptions.PermissionDenied, match="mutation 0: .*'ack' privilege on queue 'other'"):
        await asyncio.to_thread(delete, worker, "Other")
    await asyncio.to_thread(delete, worker, "UserTasks")  # ack is what a Delete of messages needs
    # Names fold as the servicer folds them, A-Z only: KELVIN SIGN is no 'k' (no other spelling of usertasks).
    kelvin_denied = r"'send' privilege on queue 'usertas\u212as' \('usertas\\u212as'\)"
    with pytest.raises(exceptions.PermissionDenied, match=kelvin_denied):
        await asyncio.to_thread(send, worker, "UserTas\u212as")

    def ddl(database: Any) -> None:
        database.update_ddl(["DROP QUEUE UserTasks"]).result(timeout=30)

    with pytest.raises(exceptions.PermissionDenied, match="'admin' privilege on queue 'usertasks'"):
        await asyncio.to_thread(ddl, worker)
    with pytest.raises(exceptions.PermissionDenied, match="'admin' privilege on every queue"):
        await asyncio.to_thread(worker.drop)
    assert sql.execute("SELECT count(*) FROM d1_usertasks").fetchone() == (1,)  # still there (and leased)
    # ops may select.
    ops = await asyncio.to_thread(database_as, OPS)
    assert [r[:2] for r in await asyncio.to_thread(query, ops, "SELECT * FROM UserTasks")] == [[1, "m"]]
    assert await asyncio.to_thread(read, ops) == [[1]]


async def test_spanner_tables_need_their_privileges_fail_closed(server, monkeypatch, sql) -> None:
    """SELECT / INSERT / UPDATE / DELETE on a table are select / send / update / ack on its name,
    by statement and by mutation; table DDL is admin; a join needs select on every table."""
    pytest.importorskip("google.cloud.spanner")
    from google.api_core import exceptions
    from google.cloud import spanner

    from ..spanner.test_spanner_client import DATABASE, INSTANCE, PROJECT, make_database

    token = _spanner_client_on(server, monkeypatch)

    def scenario() -> None:
        make_database(server.target)
        database = spanner.Client(project=PROJECT).instance(INSTANCE).database(DATABASE)
        database.update_ddl(["CREATE TABLE Users (UserId INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (UserId)",
                             "CREATE TABLE Secrets (Id INT64 NOT NULL) PRIMARY KEY (Id)"]).result(timeout=30)
        token["now"] = TABLE_WRITER
        database = spanner.Client(project=PROJECT).instance(INSTANCE).database(DATABASE)
        with database.batch() as batch:
            batch.insert("Users", ("UserId", "Name"), [(1, "a")])
        database.run_in_transaction(lambda t: t.execute_update("INSERT INTO Users (UserId) VALUES (2)"))
        with database.snapshot() as snapshot:
            assert len(list(snapshot.execute_sql("SELECT UserId FROM Users"))) == 2
        def query(text: str) -> list[Any]:
            with database.snapshot() as snapshot:
                return list(snapshot.execute_sql(text))

        def read(table: str) -> list[Any]:
            with database.snapshot() as snapshot:
                return list(snapshot.read(table, ("Id",), spanner.KeySet(all_=True)))

        denied = [
            (lambda: database.run_in_transaction(
                lambda t: t.execute_update("UPDATE Users SET Name = 'b' WHERE true")), "'update' privilege on queue 'users'"),
            (lambda: database.run_in_transaction(lambda t: t.update("Users", ("UserId", "Name"), [(1, "b")])),
             "mutation 0: .*'update' privilege on queue 'users'"),
            (lambda: database.run_in_transaction(lambda t: t.delete("Users", spanner.KeySet(all_=True))),
             "'ack' privilege on queue 'users'"),
            (lambda: query("SELECT * FROM Users u JOIN Secrets s ON s.Id = u.UserId"),
             "'select' privilege on queue 'secrets'"),
            (lambda: read("Secrets"),
             "'select' privilege on queue 'secrets'"),
            (lambda: database.update_ddl(["DROP TABLE Users"]).result(timeout=30), "'admin' privilege on queue 'users'"),
            (lambda: database.update_ddl(["CREATE INDEX ByName ON Users (Name)"]).result(timeout=30), "'admin'"),
        ]
        for call, words in denied:
            with pytest.raises(exceptions.PermissionDenied, match=words):
                call()

    await asyncio.to_thread(scenario)
    (namespace,) = sql.execute("SELECT namespace FROM spanq.spanner_databases").fetchone()
    assert sql.execute(f"SELECT userid, name FROM {namespace}users ORDER BY 1").fetchall() == [(1, "a"), (2, None)]


# -- the token file -------------------------------------------------------------------------------


GOOD = auth.digest("x")


@pytest.mark.parametrize("text, message", [
    ("[tokens.a\n", "not valid TOML"),
    ("", "defines no tokens"),
    (f'[other]\nx = 1\n[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ q = ["send"] }}', "unknown top-level"),
    ('[tokens.a]\nsha256 = "abc"\ngrants = { q = ["send"] }', "64 hex digits"),
    (f'[tokens.a]\nsha256 = "{"z" * 64}"\ngrants = {{ q = ["send"] }}', "not hexadecimal"),
    (f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ q = ["write"] }}', "unknown privilege(s) ['write']"),
    (f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ q = [] }}', "non-empty list"),
    (f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ q = "send" }}', "non-empty list"),
    (f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ }}', "grants must be a table"),
    (f'[tokens.a]\nsha256 = "{GOOD}"', "grants must be a table"),
    (f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ Bad-Name = ["send"] }}', "is not a queue name"),
    (f'[tokens.a]\nsha256 = "{GOOD}"\ntoken = "x"\ngrants = {{ q = ["send"] }}', "unknown key(s) ['token']"),
    (f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ q = ["send"] }}\n'
     f'[tokens.b]\nsha256 = "{GOOD.upper()}"\ngrants = {{ q = ["ack"] }}', "the same sha256 as [tokens.a]"),
])
def test_a_bad_token_file_is_refused_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(auth.AuthFileError) as caught:
        auth.parse(text, "tokens.toml")
    assert message in str(caught.value) and "tokens.toml" in str(caught.value)


def test_the_server_and_the_cli_refuse_a_bad_token_file(tmp_path: Any, capsys: Any) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text(f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ q = ["sned"] }}')
    with pytest.raises(SystemExit) as exited:
        cli.parse_config(["serve", "--auth-file", str(bad)], {})
    assert exited.value.code == 2 and "unknown privilege(s) ['sned']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.parse_config(["serve"], {"SPANQ_AUTH_FILE": str(tmp_path / "missing.toml")})
    assert "cannot read the token file" in capsys.readouterr().err
    # start() checks it first, before it touches the database.
    with pytest.raises(auth.AuthFileError, match="sned"):
        asyncio.run(start(Config(database_url="postgresql://nowhere.invalid/x", listen="127.0.0.1:0",
                                 auth_file=str(bad))))
    good = tmp_path / "good.toml"
    good.write_text(f'[tokens.a]\nsha256 = "{GOOD}"\ngrants = {{ q = ["send"] }}')
    assert cli.parse_config(["serve"], {"SPANQ_AUTH_FILE": str(good)}).auth_file == str(good)
    assert cli.parse_config(["serve"], {}).auth_file is None


def test_spanq_token_mints_a_token_and_its_entry(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_config(["token", "billing"], {})
    assert exited.value.code == 0
    out = capsys.readouterr().out
    token = out.splitlines()[1].removeprefix("# ")
    assert token.startswith("spanq_") and len(token) > 40
    # As printed, the grants are empty (refused); filled in, the entry authenticates the token.
    with pytest.raises(auth.AuthFileError, match="grants must be a table"):
        auth.parse(out)
    tokens = auth.parse(out.replace("grants = { }", 'grants = { q = ["send"] }'))
    principal = tokens.authenticate(bearer(token))
    assert principal.name == "billing" and principal.privileges("q") == {"send"}
    assert principal.privileges("other") == frozenset()


async def test_a_streaming_receive_is_checked_request_by_request(stub, sql) -> None:
    """receive to open it; ack for each ack on it (of the stream's queue when it names none),
    receive for each renewal. A refused request ends the stream before it is applied."""
    await make_queue(stub, "q")
    await stub.Send(queue_pb2.SendRequest(queue="q", messages=[queue_pb2.SendMessage(
        key=key("a"), payload=value("x"))]), metadata=bearer(OPS))

    async def stream(token: str, *requests: queue_pb2.StreamingReceiveRequest) -> list[Any]:
        call = stub.StreamingReceive(metadata=bearer(token))
        await call.write(queue_pb2.StreamingReceiveRequest(open=queue_pb2.ReceiveRequest(
            queue="q", max_batch_size=1, max_outstanding=1)))
        got: list[Any] = []
        async for response in call:
            got += response.messages
            got += response.answers
            if response.messages and requests:
                for request in requests:
                    kind = request.WhichOneof("request")
                    inner = getattr(request, kind)
                    if kind == "ack":
                        inner.acks[0].lease_token = response.messages[0].lease_token
                    else:
                        inner.lease_tokens[:] = [response.messages[0].lease_token]
                    await call.write(request)
                requests = ()
            if any(isinstance(g, queue_pb2.StreamAnswer) for g in got):
                call.cancel()
                return got
        return got

    def ack_of(queue: str = "") -> queue_pb2.StreamingReceiveRequest:
        return queue_pb2.StreamingReceiveRequest(ack=queue_pb2.AckRequest(
            queue=queue, request_id=f"r-{queue}-{id(object())}", acks=[queue_pb2.AckMessage(key=key("a"))]))

    code, text, info = await error_of(stream(ONLY["ack"]))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "receive" in text and info["reason"] == "PERMISSION_DENIED"
    code, text, _ = await error_of(stream(ONLY["receive"], ack_of()))  # the stream's queue, named by none
    assert code == grpc.StatusCode.PERMISSION_DENIED and "'ack'" in text and "'q'" in text, text
    assert sql.execute("SELECT count(*) FROM q").fetchone()[0] == 1, "the refused ack was not applied"
    renewal = queue_pb2.StreamingReceiveRequest(renew_lease=queue_pb2.RenewLeaseRequest(
        request_id="renew-1", lease_tokens=["t"], lease_duration=duration(30)))
    [*_, answer] = await stream(ONLY["receive"], renewal)
    assert answer.WhichOneof("result") == "renew_lease", answer
    code, text, _ = await error_of(stream(WORKER, ack_of("q")))  # no privilege on q at all
    assert code == grpc.StatusCode.PERMISSION_DENIED
    [*_, answer] = await stream(OPS, ack_of())
    assert answer.ack.results[0].acked
    assert sql.execute("SELECT count(*) FROM q").fetchone()[0] == 0
