"""What each spanq.v1 RPC needs: the privileges on which queues (docs/operations.md,
"Authentication"). auth.py applies these rules (and the Spanner front-end's,
spanner/access.py) to every call; the dashboard applies them to the page that
stands for an RPC. Each rule reads only the request: no queue is looked up
before authorization, so a refused call has done nothing."""

from typing import Any

from spanq_proto.v1 import queue_pb2

from ..edge.auth import PRIVILEGES, After, Principal, Rule, StreamRule, one, require_parent
from ..ground import errors

QUEUE_SERVICE = queue_pb2.DESCRIPTOR.services_by_name["QueueService"].full_name
"""spanq.v1.QueueService."""

DEAD_LETTER_PRIVILEGES = frozenset({"send", "admin"})
"""Either lets a token name a queue as another queue's dead_letter_queue."""
PURGE_PRIVILEGES = frozenset({"ack", "admin"})
"""Either lets a token purge a queue (DELETE ON QUEUE of every row; admin may drop it anyway)."""
MUTATION_PRIVILEGE = {"send": "send", "ack": "ack", "renew_lease": "receive"}


def _get_queue(p: Principal, request: Any) -> None:
    if not p.grants.get(request.name, p.everywhere):
        raise errors.PermissionDenied(
            f"token {p.name!r} has no privilege on queue {request.name!r}; GetQueue needs one "
            f"(any of {list(PRIVILEGES)}): grant it in the server's token file",
            token=p.name, queue=request.name,
        )


def _list_queues(p: Principal, request: Any) -> After | None:
    if p.everywhere:
        return None

    def hide(response: Any) -> None:
        """Drops the queues this token has no privilege on, in place."""
        found = response.queues
        for i in range(len(found) - 1, -1, -1):
            if found[i].name not in p.grants:
                del found[i]

    return hide


def _create_queue(p: Principal, request: Any) -> None:
    """admin on the new queue; with a dead_letter_queue, send (or admin) there too: the
    queue's dead letters will be sent to it, which the token could not do itself; with a
    parent_table, admin on the parent (auth.require_parent)."""
    queue = request.queue
    p.require("admin", queue.name, "CreateQueue")
    target = queue.dead_letter_queue
    if target and not p.grants.get(target, p.everywhere) & DEAD_LETTER_PRIVILEGES:
        raise p.denied("send", target, f"CreateQueue of {queue.name!r}, whose dead letters go there,")
    require_parent(p, queue.name, queue.parent_table, "CreateQueue")


def _update_queue(p: Principal, request: Any) -> None:
    """admin on the queue; a new dead_letter_queue as CreateQueue's (send or admin there)."""
    queue = request.queue
    p.require("admin", queue.name, "UpdateQueue")
    target = queue.dead_letter_queue if "dead_letter_queue" in request.update_mask.paths else ""
    if target and not p.grants.get(target, p.everywhere) & DEAD_LETTER_PRIVILEGES:
        raise p.denied("send", target, f"UpdateQueue of {queue.name!r}, whose dead letters would go there,")


def _commit(p: Principal, request: Any) -> None:
    for i, mutation in enumerate(request.mutations):
        kind = mutation.WhichOneof("operation")
        if kind is None:
            continue  # the servicer says what is wrong with it
        privilege = MUTATION_PRIVILEGE[kind]
        queue = getattr(mutation, kind).queue
        if privilege not in p.grants.get(queue, p.everywhere):
            raise p.denied(privilege, queue, f"a {kind} mutation", f"mutation {i}: ", mutation_index=str(i))


STREAMED_PRIVILEGE = {"open": "receive", "ack": "ack", "renew_lease": "receive"}


def _streaming_receive(p: Principal, request: Any, first: Any) -> None:
    """receive on the stream's queue as it opens; each ack then needs ack there, each renewal
    receive, on the queue it names or, naming none, the stream's."""
    kind = request.WhichOneof("request")
    if kind is None:
        return  # the servicer says what is wrong with it
    inner = getattr(request, kind)
    queue = inner.queue or (first.open.queue if first is not None and kind != "open" else "")
    privilege = STREAMED_PRIVILEGE[kind]
    if privilege not in p.grants.get(queue, p.everywhere):
        raise p.denied(privilege, queue, "StreamingReceive" if kind == "open" else f"a StreamingReceive's {kind}")


def _purge(p: Principal, request: Any) -> None:
    if not p.grants.get(request.queue, p.everywhere) & PURGE_PRIVILEGES:
        raise p.denied("ack", request.queue, "Purge")


def _redrive(p: Principal, request: Any) -> None:
    if not p.grants.get(request.queue, p.everywhere) & PURGE_PRIVILEGES:
        raise p.denied("ack", request.queue, "Redrive, which deletes from the dead-letter queue,")
    target = request.to
    if not target:
        if not p.everywhere & DEAD_LETTER_PRIVILEGES:
            raise errors.PermissionDenied(
                f"token {p.name!r} must name the target queue of a Redrive of {request.queue!r} (`to`, --to QUEUE): "
                "it has send on only some queues, and the default target is found after authorization",
                token=p.name, queue=request.queue,
            )
        return
    if not p.grants.get(target, p.everywhere) & DEAD_LETTER_PRIVILEGES:
        raise p.denied("send", target, f"Redrive of {request.queue!r}, which sends there,")


RULES: dict[str, Rule | StreamRule] = {
    f"{QUEUE_SERVICE}/CreateQueue": _create_queue,
    f"{QUEUE_SERVICE}/UpdateQueue": _update_queue,
    f"{QUEUE_SERVICE}/DropQueue": one("admin", "name", "DropQueue"),
    f"{QUEUE_SERVICE}/GetQueue": _get_queue,
    f"{QUEUE_SERVICE}/ListQueues": _list_queues,
    f"{QUEUE_SERVICE}/Send": one("send", "queue", "Send"),
    f"{QUEUE_SERVICE}/Receive": one("receive", "queue", "Receive"),
    f"{QUEUE_SERVICE}/StreamingReceive": StreamRule(_streaming_receive),
    f"{QUEUE_SERVICE}/RenewLease": one("receive", "queue", "RenewLease (and a release, lease_duration 0)"),
    f"{QUEUE_SERVICE}/Ack": one("ack", "queue", "Ack"),
    f"{QUEUE_SERVICE}/Commit": _commit,
    f"{QUEUE_SERVICE}/GetQueueStats": one("select", "name", "GetQueueStats"),
    f"{QUEUE_SERVICE}/Peek": one("select", "queue", "Peek"),
    f"{QUEUE_SERVICE}/Purge": _purge,
    f"{QUEUE_SERVICE}/Redrive": _redrive,
}


def rule(method: str) -> Rule:
    """The rule of a QueueService method by its short name ("Peek"): the dashboard's pages
    ask what their RPC would (server.py hands it this)."""
    found = RULES[f"{QUEUE_SERVICE}/{method}"]
    assert not isinstance(found, StreamRule), "the dashboard's pages stand for unary RPCs"
    return found
