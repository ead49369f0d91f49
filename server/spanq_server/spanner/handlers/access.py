"""What each method of Spanner's services needs: the privileges on which queues, read
from the statements and mutations of its request (docs/operations.md,
"Authentication"). auth.py applies these rules to every call, before the servicer
runs it; every method served is listed, those that touch no queue as
``auth.any_token``.

A statement is the exception: what it names depends on how it is read, and only its
database's parser, in its dialect, says that (the same text is a string and a
comment in GoogleSQL, a name and a comment in PostgreSQL). So its rule here admits
the call, and the executor, where it parses the statement to run it, hands that
parse to ``authorize``: the one parse checked is the object that then runs, never a
reading of the text by another parser or dialect. A text the parser refuses is
refused with its error and runs nothing.
"""

import contextvars
from collections.abc import Iterable
from typing import Any

from ...edge.auth import EVERY_QUEUE, PRINCIPAL, After, Principal, Rule, any_token, require_parent
from ...ground import errors
from .. import DATABASE_ADMIN, INSTANCE_ADMIN, OPERATIONS, SPANNER
from ..query import ast, grants, parser
from ..query.lexing import fold

STATEMENT_PRIVILEGE: dict[type, str] = {
    ast.CreateQueue: "admin",
    ast.AlterQueue: "admin",
    ast.DropQueue: "admin",
    ast.Receive: "receive",
    ast.RenewLease: "receive",
    ast.QueueInsert: "send",
    ast.QueueDelete: "ack",
    ast.QueueSelect: "select",
}
"""The privilege each kind of statement needs on the queue it names. A statement of a kind
not listed is refused (fail closed): a new statement comes with its privilege."""

SESSION_ROLE: contextvars.ContextVar["grants.Role | None"] = contextvars.ContextVar("spanq_session_role",
                                                                                    default=None)
"""The database role of the call's session (its creator_role), set by the servicer once it has
read the session's role and privileges; None for a session without one."""


def authorize(statement: ast.Statement, where: str = "") -> None:
    """Refuses a parsed statement the call's token may not run (PermissionDenied), and one the
    session's role may not (the token first: a role narrows a token, never widens it); the
    executor calls it on each statement it parses, before it runs. Nothing to check when the
    server has no token file and the session no role."""
    principal = PRINCIPAL.get()
    if principal is not None:
        check(principal, statement, where)
    role = SESSION_ROLE.get()
    if role is not None and not isinstance(statement, ast.Ddl):  # DDL is the admin API's, no session's
        needs = grants.statement_needs(statement, statement_needs)
        if needs is None:
            raise errors.PermissionDenied(f"{where}the server has no rule for a {ast.kind(statement)} statement "
                                          f"under role {role.name}, so it refuses it", role=role.name)
        for kinds, name, privilege in needs:
            role.require(kinds, name, privilege, where)


def role_commit(role: "grants.Role", request: Any, tables: set[str]) -> None:
    """What a Commit's mutations need of the session's role: INSERT for a Send (and a table's
    Insert), DELETE for an Ack or a Delete, and the table privileges of the Write mutations
    (``tables``: which of the names its Deletes name are tables, the others queues)."""
    for i, mutation in enumerate(request.mutations):
        kind = mutation.WhichOneof("operation")
        where = f"mutation {i}: "
        for privilege, table in mutation_needs(mutation):
            role.require(("table",), table, grants.SPANNER_PRIVILEGE[privilege], where)
        if kind == "send":
            role.require(("queue",), fold(mutation.send.queue), "insert", where)
        elif kind == "ack":
            role.require(("queue",), fold(mutation.ack.queue), "delete", where)
        elif kind == "delete":
            name = fold(mutation.delete.table)
            role.require(("table",) if name in tables else ("queue",), name, "delete", where)


def role_read(role: "grants.Role", request: Any, table: bool) -> None:
    """A Read needs SELECT on its table (``table``) or queue."""
    role.require(("table",) if table else ("queue",), fold(request.table), "select")


def check(p: Principal, statement: ast.Statement, where: str = "") -> None:
    """What ``statement`` needs of ``p``: its kind's privilege on the queue it names, or
    (the table subset, ``statement_needs``) each privilege on each table or queue; roles
    and their privileges (``_access_ddl``) and the proto bundle admin."""
    kind = ast.kind(statement)
    if isinstance(statement, (ast.CreateRole, ast.DropRole, ast.Grant, ast.GrantRole)):
        _access_ddl(p, statement, kind, where)
        return
    if isinstance(statement, ast.ProtoBundle):  # its types are every column's of the database
        if "admin" not in p.everywhere:
            raise p.denied("admin", EVERY_QUEUE, f"the DDL statement ({kind}: a proto bundle spans the database)",
                           where)
        return
    if not isinstance(statement, ast.QueueStatement):
        what = "the DDL statement" if isinstance(statement, ast.TableDdl) else "the statement"
        needs = statement_needs(statement)
        if needs is None:
            raise _no_rule(p, kind, where)
        for needed, table in needs:
            if needed not in p.grants.get(table, p.everywhere):
                raise p.denied(needed, table, f"{what} (on a table)", where)
        return
    ddl = isinstance(statement, (ast.CreateQueue, ast.AlterQueue, ast.DropQueue))
    what = "the DDL statement" if ddl else "the statement"
    privilege = STATEMENT_PRIVILEGE.get(type(statement))
    if privilege is None:
        raise _no_rule(p, kind, where)
    queue = statement.name if isinstance(statement, (ast.CreateQueue, ast.AlterQueue, ast.DropQueue)) \
        else statement.queue
    privileges = [privilege] + (["select"] if isinstance(statement, ast.QueueInsert) and statement.returning else [])
    for one in privileges:  # THEN RETURN reads what it wrote: SELECT, as on a table
        if one not in p.grants.get(queue, p.everywhere):
            raise p.denied(one, queue, f"{what} ({kind})", where)
    if isinstance(statement, ast.CreateQueue):
        require_parent(p, queue, statement.parent_table, f"{what} ({kind})", where)


def _access_ddl(p: Principal, statement: ast.AccessDdl, kind: str, where: str) -> None:
    """A role spans its database: CREATE and DROP ROLE and GRANT / REVOKE ROLE need ``admin``
    on every queue ("*"); a GRANT or REVOKE of privileges needs ``admin`` on each queue or
    table it names (a table function: its queue)."""
    if not isinstance(statement, ast.Grant):
        if "admin" not in p.everywhere:
            raise p.denied("admin", EVERY_QUEUE, f"the DDL statement ({kind}: a role spans the database)", where)
        return
    for name in statement.names:
        target = name.split("_", 1)[1] if statement.on == "function" else name
        p.require("admin", target, f"the DDL statement ({'REVOKE' if statement.revoke else 'GRANT'})", where)


def _no_rule(p: Principal, kind: str, where: str) -> errors.PermissionDenied:
    return errors.PermissionDenied(
        f"{where}the server has no authorization rule for a {kind} statement, so it refuses it; "
        "this is a bug of the server: report it", token=p.name, statement=kind)


def _checked_as_parsed(p: Principal, request: Any) -> None:
    """The rule of the methods that carry statements (ExecuteSql, ExecuteStreamingSql,
    ExecuteBatchDml, UpdateDatabaseDdl, CreateDatabase): a valid token here; each
    statement is checked by ``authorize`` once the executor has parsed it."""


def _commit(p: Principal, request: Any) -> None:
    for i, mutation in enumerate(request.mutations):
        kind = mutation.WhichOneof("operation")
        for privilege, table in mutation_needs(mutation):  # a table's Write mutations
            if privilege not in p.grants.get(table, p.everywhere):
                raise p.denied(privilege, table, f"a {kind} mutation", f"mutation {i}: ", mutation_index=str(i))
        if kind in ("send", "ack", "delete"):
            target = getattr(mutation, kind)
            queue = fold(target.table if kind == "delete" else target.queue)  # as the servicer folds it
            needs = "ack" if kind == "delete" else kind  # a Delete of a queue's messages acks them
            if needs not in p.grants.get(queue, p.everywhere):
                raise p.denied(needs, queue, f"a {kind.capitalize()} mutation", f"mutation {i}: ",
                               mutation_index=str(i))
        # (any other mutation is refused by the servicer)


def _read(p: Principal, request: Any) -> None:
    queue = fold(request.table)
    if "select" not in p.grants.get(queue, p.everywhere):
        raise p.denied("select", queue, "a Read of its messages")


def _drops_queues(what: str) -> Rule:
    def rule(p: Principal, request: Any) -> None:
        if "admin" not in p.everywhere:
            raise p.denied("admin", EVERY_QUEUE, f"{what} (it drops the queues it holds)")

    return rule


def _ddl_readings(text: str) -> Iterable[ast.QueueStatement]:
    """GetDatabaseDdl's text of a queue (the server's own, in its database's dialect), as each
    dialect reads it: only to name the queue it shows, never to authorize a client's text."""
    for pg in (False, True):
        try:
            yield parser.parse_queue(text, parser.Dialect.of(pg))
        except errors.InvalidArgument:
            continue


def _database_ddl(p: Principal, request: Any) -> After | None:
    if p.everywhere:
        return None

    def hide(response: Any) -> None:
        """Drops the DDL of the queues this token has no privilege on, in place."""
        found = response.statements
        for i in range(len(found) - 1, -1, -1):
            if found[i].startswith("CREATE PROTO BUNDLE"):  # every column's types, no queue's data
                continue
            # A PostgreSQL-dialect database's DDL is in its dialect.
            name = ddl_name(found[i]) or next(
                (s.name for s in _ddl_readings(found[i]) if isinstance(s, (ast.CreateQueue, ast.DropQueue))), "")
            if name not in p.grants:
                del found[i]

    return hide


# -- Spanner tables ---------------------------------------------------------------
#
# What Spanner-table statements and mutations need under authentication, as
# Spanner's fine-grained access control would grant it, in spanq's privileges
# (auth.py): a table shares the database's namespace with its queues, and a
# grant names either.
#
# - SELECT on a table (a SELECT, each table of a join, a Read, THEN RETURN): ``select``
#   (the WHERE of an UPDATE or DELETE needs no ``select``, a difference from Spanner,
#   which asks SELECT on the columns it reads);
# - INSERT (an INSERT, an Insert mutation): ``send``, as INSERT ON QUEUE is;
# - UPDATE (an UPDATE, an Update mutation): ``update``;
# - DELETE (a DELETE, a Delete mutation): ``ack``, as DELETE ON QUEUE is;
# - InsertOrUpdate: ``send`` and ``update``; Replace: ``send``, ``update`` and ``ack``;
# - CREATE / DROP TABLE and INDEX: ``admin`` on the table (and on a parent).
#
# Fail-closed: every name a statement reads or writes is checked, on the parse that
# runs; a statement no parser reads runs nothing.

Need = tuple[str, str]
"""(privilege, table or queue name, folded)."""


def statement_needs(statement: ast.TableSubset) -> list[Need] | None:
    """The privileges a parsed statement of the table subset needs; None for a kind of
    statement this has no rule for (refused: fail closed)."""
    if isinstance(statement, ast.CreateTable):
        return [("admin", statement.name)] + ([("admin", statement.parent)] if statement.parent else [])
    if isinstance(statement, ast.CreateIndex):
        return [("admin", statement.name), ("admin", statement.table)]
    if isinstance(statement, (ast.DropTable, ast.DropIndex, ast.AlterTable)):
        return [("admin", statement.name)]
    # Every SELECT inside (subqueries, UNION ALL's parts) reads its relations: select on each.
    inner = [("select", n) for select in ast.selects_in(statement) for n in ast.read_by(select)]
    if isinstance(statement, ast.Select):
        return [("select", n) for n in ast.read_by(statement)] + inner
    if inner and not isinstance(statement, (ast.Insert, ast.Update, ast.Delete)):
        return None
    if isinstance(statement, ast.Insert):
        needs = [("send", statement.table)]
        if statement.on_conflict == "update":
            needs.append(("update", statement.table))
        return needs + ([("select", statement.table)] if statement.returning is not None else []) + inner
    if isinstance(statement, (ast.Update, ast.Delete)):
        table = statement.table.name
        returning = [("select", table)] if statement.returning is not None else []
        return [("update" if isinstance(statement, ast.Update) else "ack", table)] + returning + inner
    return None


MUTATION_NEEDS = {"insert": ("send",), "update": ("update",), "insert_or_update": ("send", "update"),
                  "replace": ("send", "update", "ack")}


def mutation_needs(mutation: Any) -> Iterable[Need]:
    """A Write mutation's privileges on its table (Delete is checked as a queue's, ``ack``)."""
    kind = mutation.WhichOneof("operation")
    for privilege in MUTATION_NEEDS.get(kind, ()):
        yield privilege, fold(getattr(mutation, kind).table)


def ddl_name(text: str) -> str | None:
    """The table a GetDatabaseDdl statement of a table or index is about (its visibility)."""
    try:
        statement = parser.parse_table(text)
    except errors.InvalidArgument:
        return None
    if isinstance(statement, ast.CreateTable):
        return statement.name
    if isinstance(statement, ast.CreateIndex):
        return statement.table
    return None


RULES: dict[str, Rule] = {
    # statements, reads and mutations: the privilege on each queue they name
    f"{SPANNER}/ExecuteSql": _checked_as_parsed,
    f"{SPANNER}/ExecuteStreamingSql": _checked_as_parsed,
    f"{SPANNER}/ExecuteBatchDml": _checked_as_parsed,
    f"{SPANNER}/Commit": _commit,
    f"{SPANNER}/Read": _read,
    f"{SPANNER}/StreamingRead": _read,
    f"{DATABASE_ADMIN}/UpdateDatabaseDdl": _checked_as_parsed,
    f"{DATABASE_ADMIN}/CreateDatabase": _checked_as_parsed,
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
