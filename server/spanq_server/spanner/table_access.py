"""What Spanner-table statements and mutations need under authentication, as
Spanner's fine-grained access control would grant it, in spanq's privileges
(auth.py): a table shares the database's namespace with its queues, and a
grant names either.

- SELECT on a table (a SELECT, each table of a join, a Read, THEN RETURN): ``select``
  (the WHERE of an UPDATE or DELETE needs no ``select``, a difference from Spanner,
  which asks SELECT on the columns it reads);
- INSERT (an INSERT, an Insert mutation): ``send``, as INSERT ON QUEUE is;
- UPDATE (an UPDATE, an Update mutation): ``update``;
- DELETE (a DELETE, a Delete mutation): ``ack``, as DELETE ON QUEUE is;
- InsertOrUpdate: ``send`` and ``update``; Replace: ``send``, ``update`` and ``ack``;
- CREATE / DROP TABLE and INDEX: ``admin`` on the table (and on a parent).

Fail-closed: every name a statement reads or writes is checked, on the parse that
runs (spanner/access.py); a statement no parser reads runs nothing.
"""

from collections.abc import Iterable
from typing import Any

from .. import errors
from . import googlesql as g
from .lexing import fold

Need = tuple[str, str]
"""(privilege, table or queue name, folded)."""


def statement_needs(statement: g.Statement) -> list[Need] | None:
    """The privileges a parsed statement of the table subset needs; None for a kind of
    statement this has no rule for (refused: fail closed)."""
    if isinstance(statement, g.CreateTable):
        return [("admin", statement.name)] + ([("admin", statement.parent)] if statement.parent else [])
    if isinstance(statement, g.CreateIndex):
        return [("admin", statement.name), ("admin", statement.table)]
    if isinstance(statement, (g.DropTable, g.DropIndex)):
        return [("admin", statement.name)]
    if isinstance(statement, g.Select):
        names = [j.relation.name for j in statement.joins] + ([statement.source.name] if statement.source else [])
        return [("select", n) for n in names]
    if isinstance(statement, g.Insert):
        needs = [("send", statement.table)]
        if statement.on_conflict == "update":
            needs.append(("update", statement.table))
        return needs + ([("select", statement.table)] if statement.returning is not None else [])
    if isinstance(statement, (g.Update, g.Delete)):
        table = statement.table.name
        returning = [("select", table)] if statement.returning is not None else []
        return [("update" if isinstance(statement, g.Update) else "ack", table)] + returning
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
        statement = g.parse(text)
    except errors.InvalidArgument:
        return None
    if isinstance(statement, g.CreateTable):
        return statement.name
    if isinstance(statement, g.CreateIndex):
        return statement.table
    return None
