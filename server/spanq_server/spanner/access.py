"""What each method of Spanner's services needs: the privileges on which queues, read
from the statements and mutations of its request (docs/operations.md,
"Authentication"). auth.py applies these rules to every call, before the servicer
runs it; every method served is listed, those that touch no queue as
``auth.any_token``.

A statement is read with the parser the servicer runs it with, and its parse is
the one the servicer then uses (statements.parse keeps it). The database's dialect
is the servicer's to learn (after authorization): a statement is checked as each
dialect reads it. One that parses in neither is let through, for the servicer to
refuse with INVALID_ARGUMENT before it runs anything.
"""

from collections.abc import Iterable
from typing import Any

from .. import errors
from ..auth import EVERY_QUEUE, After, Principal, Rule, any_token, require_parent
from . import DATABASE_ADMIN, INSTANCE_ADMIN, OPERATIONS, SPANNER
from . import statements as st

STATEMENT_PRIVILEGE: dict[type, str] = {
    st.CreateQueue: "admin",
    st.DropQueue: "admin",
    st.Receive: "receive",
    st.RenewLease: "receive",
    st.Insert: "send",
    st.Delete: "ack",
    st.Select: "select",
}
"""The privilege each kind of statement needs on the queue it names. A statement of a kind
not listed is refused (fail closed): a new statement comes with its privilege."""


def _readings(text: str, ddl: bool) -> Iterable[st.Statement]:
    """The statement as each dialect reads it (none, one or both)."""
    for pg in (False, True):
        try:
            yield st.parse_ddl(text, pg) if ddl else st.parse(text, pg)
        except errors.InvalidArgument:
            continue


def _target(statement: st.Statement) -> str:
    return statement.name if isinstance(statement, (st.CreateQueue, st.DropQueue)) else statement.queue


def _check_sql(p: Principal, texts: Iterable[str], label: str, what: str, ddl: bool = False) -> None:
    for i, text in enumerate(texts):
        where = f"{label} {i}: " if label else ""
        for statement in _readings(text, ddl):
            kind = type(statement).__name__
            privilege = STATEMENT_PRIVILEGE.get(type(statement))
            if privilege is None:
                raise errors.PermissionDenied(
                    f"{where}the server has no authorization rule for a {kind} statement, so it refuses it; "
                    "this is a bug of the server: report it", token=p.name, statement=kind)
            queue = _target(statement)
            if privilege not in p.grants.get(queue, p.everywhere):
                raise p.denied(privilege, queue, f"{what} ({kind})", where)
            if isinstance(statement, st.CreateQueue):
                require_parent(p, queue, statement.parent_table, f"{what} ({kind})", where)


def _execute_sql(p: Principal, request: Any) -> None:
    _check_sql(p, (request.sql,), "", "the statement")


def _execute_batch_dml(p: Principal, request: Any) -> None:
    _check_sql(p, (s.sql for s in request.statements), "statement", "the statement")


def _update_ddl(p: Principal, request: Any) -> None:
    _check_sql(p, request.statements, "statement", "the DDL statement", ddl=True)


def _create_database(p: Principal, request: Any) -> None:
    _check_sql(p, request.extra_statements, "extra statement", "the DDL statement", ddl=True)


def _commit(p: Principal, request: Any) -> None:
    for i, mutation in enumerate(request.mutations):
        kind = mutation.WhichOneof("operation")
        if kind in ("send", "ack", "delete"):
            target = getattr(mutation, kind)
            queue = st.fold(target.table if kind == "delete" else target.queue)  # as the servicer folds it
            needs = "ack" if kind == "delete" else kind  # a Delete of a queue's messages acks them
            if needs not in p.grants.get(queue, p.everywhere):
                raise p.denied(needs, queue, f"a {kind.capitalize()} mutation", f"mutation {i}: ",
                               mutation_index=str(i))
        # (any other mutation is refused by the servicer: Commit takes Send, Ack and Delete only)


def _read(p: Principal, request: Any) -> None:
    queue = st.fold(request.table)
    if "select" not in p.grants.get(queue, p.everywhere):
        raise p.denied("select", queue, "a Read of its messages")


def _drops_queues(what: str) -> Rule:
    def rule(p: Principal, request: Any) -> None:
        if "admin" not in p.everywhere:
            raise p.denied("admin", EVERY_QUEUE, f"{what} (it drops the queues it holds)")

    return rule


def _database_ddl(p: Principal, request: Any) -> After | None:
    if p.everywhere:
        return None

    def hide(response: Any) -> None:
        """Drops the DDL of the queues this token has no privilege on, in place."""
        found = response.statements
        for i in range(len(found) - 1, -1, -1):
            # A PostgreSQL-dialect database's DDL is in its dialect.
            name = next((s.name for s in _readings(found[i], ddl=True)
                         if isinstance(s, (st.CreateQueue, st.DropQueue))), "")
            if name not in p.grants:
                del found[i]

    return hide


RULES: dict[str, Rule] = {
    # statements, reads and mutations: the privilege on each queue they name
    f"{SPANNER}/ExecuteSql": _execute_sql,
    f"{SPANNER}/ExecuteStreamingSql": _execute_sql,
    f"{SPANNER}/ExecuteBatchDml": _execute_batch_dml,
    f"{SPANNER}/Commit": _commit,
    f"{SPANNER}/Read": _read,
    f"{SPANNER}/StreamingRead": _read,
    f"{DATABASE_ADMIN}/UpdateDatabaseDdl": _update_ddl,
    f"{DATABASE_ADMIN}/CreateDatabase": _create_database,
    f"{DATABASE_ADMIN}/DropDatabase": _drops_queues("DropDatabase"),
    f"{DATABASE_ADMIN}/GetDatabaseDdl": _database_ddl,
    f"{INSTANCE_ADMIN}/DeleteInstance": _drops_queues("DeleteInstance"),
    # sessions, transactions (their statements and mutations are checked above), and the
    # bookkeeping of instances, databases and operations: they touch no queue
    **{f"{SPANNER}/{m}": any_token for m in (
        "CreateSession", "BatchCreateSessions", "GetSession", "ListSessions", "DeleteSession",
        "BeginTransaction", "Rollback", "PartitionQuery", "PartitionRead")},
    **{f"{INSTANCE_ADMIN}/{m}": any_token for m in (
        "ListInstanceConfigs", "GetInstanceConfig", "CreateInstance", "GetInstance", "ListInstances")},
    **{f"{DATABASE_ADMIN}/{m}": any_token for m in (
        "GetDatabase", "ListDatabases", "ListBackups", "ListBackupOperations", "ListDatabaseOperations",
        "ListDatabaseRoles", "GetBackup", "DeleteBackup")},
    **{f"{OPERATIONS}/{m}": any_token for m in (
        "GetOperation", "WaitOperation", "ListOperations", "DeleteOperation", "CancelOperation")},
}
