"""Runs parsed statements on the domain: RECEIVE on the Receiver, RENEWLEASE,
INSERT and DELETE as the domain's mutations, SELECT on the Operator; DDL on the
Catalog. Values are resolved from literals and parameters by the column they
meet. No protobuf beyond google.protobuf.Value, no SQL.
"""

import asyncio
import dataclasses
import operator
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from google.protobuf import struct_pb2

from ...domain import queues
from ...domain.exactly_once import ExactlyOnce
from ...domain.mutations import AckOp, Mutation, Mutator, RenewOp, SendOp
from ...domain.operator import Operator
from ...domain.queues import Catalog
from ...domain.receive.stream import MAX_BATCH, MAX_STREAM_DURATION, Receiver, ReceiveOptions
from ...domain.records import Records
from ...ground import errors
from ...ground.clock import Clock
from ...ground.model import AckItem, ColumnType, KeyColumn, LeasedMessage, OutgoingMessage, QueueDef
from ..port import TableStore
from . import ast, dialects, parser, postgres
from . import values
from .grants import Roles
from .lexing import fold
from .names import PG_SYSTEM, Names, Spelling
from .parser import Dialect, Parsed
from .protos import Bundles
from .scope import DEFAULT_SCOPE, RESERVED, Scope, in_a_namespace
from .tables import Tables, TableResult


class Use(Protocol):
    """What a statement runs in, as the engine sees it (handlers/transactions.Use is one): a
    strong read (``read_only``), partitioned DML, or a read-write transaction held on first use."""

    @property
    def read_only(self) -> bool: ...

    @property
    def partitioned(self) -> bool: ...

    @property
    def hold(self) -> Callable[[], Any]:
        """Coroutine function: the transaction's OpenTransaction, begun on first use."""
        ...


Authorize = Callable[[Any, str], None]
"""Refuses a parsed statement the call's token may not run (handlers/access.authorize)."""


class RowCountMismatch(errors.QueueError):
    """ASSERT_ROWS_MODIFIED: the statement changed another number of rows (OUT_OF_RANGE)."""


DEFAULT_RECEIVE_DURATION = timedelta(minutes=20)
"""RECEIVE without max_duration (the docs recommend 20 minutes)."""
DEFAULT_RECEIVE_BATCH = 100
RENEW_ATTEMPTS = 3
"""A RENEWLEASE under a read-only transaction whose commit outcome is unknown is settled and retried."""

RECEIVE_COLUMNS = [("SpannerLeaseExpirationTimestamp", ColumnType.TIMESTAMP), ("SpannerLeaseToken", ColumnType.STRING),
                   ("SpannerLastBatchMessage", ColumnType.BOOL)]
RENEW_COLUMNS = [("SpannerOldLeaseToken", ColumnType.STRING), ("SpannerNewLeaseToken", ColumnType.STRING),
                 ("SpannerLeaseExpirationTimestamp", ColumnType.TIMESTAMP)]
SYSTEM_COLUMNS = {"payload": "payload", "delivertime": "deliver_time", "deliver_time": "deliver_time"}
FILTERED_PAUSE = 0.2
"""Seconds a RECEIVE with WHERE waits after a batch none of whose messages matched, before
leasing again: the ones it gave back are due again at once."""
COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
           ">=": operator.ge}


@dataclasses.dataclass(frozen=True)
class Output:
    """A column a statement can return: its folded name, its name in results, its type."""

    key: str
    name: str
    type: values.Shown
    hidden: bool = False
    """Declared HIDDEN: left out of ``*``, returned when named."""


def project(available: list[Output], items: tuple[ast.Item, ...] | None,
            what: str) -> tuple[list[int], list[tuple[str, values.Shown]]]:
    """The positions and result columns a SELECT list picks (all for ``*``), named as
    declared or as the ``AS`` alias says."""
    if items is None:
        shown = [i for i, c in enumerate(available) if not c.hidden]
        return shown, [(available[i].name, available[i].type) for i in shown]
    by_key = {c.key: i for i, c in enumerate(available)}
    chosen: list[int] = []
    named: list[tuple[str, values.Shown]] = []
    for item in items:
        if item.column == ast.ALL_COLUMNS:  # r.*: as * gives them, HIDDEN ones left out
            shown = [i for i, c in enumerate(available) if not c.hidden]
            chosen += shown
            named += [(available[i].name, available[i].type) for i in shown]
            continue
        key = PG_SYSTEM.get(item.column, item.column)  # either dialect's names of the system columns
        if key not in by_key:
            raise errors.InvalidArgument(f"{what} has no column {item.column!r}; it has "
                                         f"{', '.join(c.name for c in available)}")
        chosen.append(by_key[key])
        named.append((item.alias or available[by_key[key]].name, available[by_key[key]].type))
    return chosen, named


@dataclasses.dataclass
class Result:
    columns: Sequence[tuple[str, values.Shown]]
    rows: list[list[struct_pb2.Value]]
    row_count: int | None = None
    """For DML: the rows it changed."""


Params = Any
"""A google.protobuf.Struct of parameter values."""


Rows = list[list[struct_pb2.Value]]


class _RenewedRows:
    """RENEWLEASE's rows as the commit ledger records them (exactly_once.Reply): a ListValue of rows."""

    def __init__(self, rows_of: Callable[[Any], Rows]) -> None:
        self._rows_of = rows_of

    def encode(self, mutations: Sequence[Mutation], results: Sequence[Any]) -> tuple[Rows, bytes]:
        rows = self._rows_of(results[0])
        table = struct_pb2.ListValue()
        for row in rows:
            table.values.add().list_value.values.extend(row)
        return rows, table.SerializeToString()

    def replay(self, recorded: bytes) -> Rows:
        return [list(row.list_value.values) for row in struct_pb2.ListValue.FromString(recorded).values]


class _StrongRead:
    """A statement's Use outside any transaction: a strong read (a partitioned DELETE's reads)."""

    read_only = True
    partitioned = False

    @staticmethod
    async def hold() -> Any:
        raise AssertionError("a strong read holds no transaction")


_STRONG_READ = _StrongRead()


class _AckedCount:
    """A partitioned DELETE's batch as the commit ledger records it: how many messages it acked."""

    def encode(self, mutations: Sequence[Mutation], results: Sequence[Any]) -> tuple[int, bytes]:
        count = sum(1 for acks in results for r in acks if r.acked)
        return count, str(count).encode()

    def replay(self, recorded: bytes) -> int:
        return int(recorded.decode())


class Executor:
    def __init__(self, catalog: Catalog, mutator: Mutator, receiver: Receiver, operator: Operator, records: Records,
                 tables: TableStore, clock: Clock, exactly_once: ExactlyOnce, authorize: Authorize) -> None:
        self.names = Names(records, catalog)
        self.roles = Roles(records)
        """Database roles and their privileges (grants.py)."""
        self.protos = Bundles(records)
        """Each database's proto bundle (protos.py)."""
        self.tables = Tables(tables, catalog, self.names, self.protos)
        """Spanner tables (tables.py): the statements parser.parse gives the table subset run there."""
        self._catalog = catalog
        self._records = records
        self._mutator = mutator
        self._once = exactly_once
        self._receiver = receiver
        self._operator = operator
        self._clock = clock
        self._authorize = authorize

    # -- queries and DML ----------------------------------------------------------

    async def queue(self, ns: Scope, name: str, *, fresh: bool = False) -> QueueDef:
        """A queue by its (folded) Spanner name, in the namespace of a database (see admin.scope);
        ``fresh`` as Catalog.get's."""
        if ns.prefix:
            queues.check_name(name, "queue name", queues.MAX_QUEUE_NAME - len(ns.prefix))
        elif not ns.owns(name):
            raise errors.QueueNotFound(f"queue {name!r} does not exist in this database ({RESERVED})")
        try:
            return await self._catalog.get(ns.prefix + name, fresh=fresh)
        except errors.QueueNotFound:
            if not ns.prefix:
                raise
            raise errors.QueueNotFound(f"queue {name!r} does not exist in this database; create it with "
                                       "CREATE QUEUE (database.update_ddl)") from None

    # Every statement that runs is parsed here, once, in its database's dialect, and that parse
    # is what authorization checks (handlers/access.authorize, under a token file) before it is returned:
    # the object checked is the object run, so no other reading of the text can slip through.

    async def parse(self, text: str, ns: Scope = DEFAULT_SCOPE, where: str = "") -> Parsed:
        """A statement of the queue surface, else of the table subset (a SELECT, INSERT or DELETE
        naming a table of the database is the table subset's), authorized for the call's token
        (``where`` begins a refusal: "statement 2: ")."""
        parsed = await self._parse(text, ns)
        self._authorize(parsed.statement, where)
        return parsed

    async def _parse(self, text: str, ns: Scope) -> Parsed:
        async def is_table(name: str) -> bool:
            return await self.tables.is_table(ns, name)

        async def any_table(names: Iterable[str]) -> bool:
            return await self.tables.any_table(ns, names)

        return await parser.parse(text, Dialect.of(ns.pg), is_table, any_table)

    def parse_ddl(self, text: str, ns: Scope = DEFAULT_SCOPE, where: str = "") -> ast.Ddl:
        """A DDL statement: of queues, or (GoogleSQL) of tables and indexes; authorized as ``parse``'s."""
        statement = parser.parse_ddl(text, Dialect.of(ns.pg))
        self._authorize(statement, where)
        return statement

    async def run(self, parsed: Parsed, params: Params, use: Use, ns: Scope = DEFAULT_SCOPE,
                  param_types: Any = None) -> "Result | TableResult":
        """Runs a parsed statement: the one dispatch on the syntax tree, for both surfaces."""
        statement = parsed.statement
        if isinstance(statement, ast.Ddl):
            raise errors.InvalidArgument("DDL goes through DatabaseAdmin.UpdateDatabaseDdl (database.update_ddl)")
        if isinstance(statement, ast.Delete) and ns.owns(statement.table.name) \
                and await self._catalog.exists(ns.prefix + statement.table.name):  # a queue's messages, by any WHERE
            queue = await self.queue(ns, statement.table.name)
            try:
                return await self._direct_delete(queue, statement, params, param_types, use, ns)
            except errors.QueueError as exc:
                await self.names.shown_in(exc, queue)
                raise
        if isinstance(statement, (ast.Select, ast.Insert, ast.Update, ast.Delete)):  # the table subset
            return await self.tables.run(statement, params, param_types, use, ns, parsed.long)
        if isinstance(statement, ast.Receive):
            raise errors.InvalidArgument(
                "RECEIVE is a long-running streaming query: run it with ExecuteStreamingSql in a single-use "
                "read-only transaction (database.snapshot().execute_sql(...))"
            )
        queue = await self.queue(ns, statement.queue)
        try:
            if isinstance(statement, ast.QueueSelect):
                return await self._select(queue, statement, params, use)
            if isinstance(statement, ast.RenewLease):
                return await self._renew(queue, statement, params, use)
            if use.read_only:
                raise errors.InvalidArgument(
                    "INSERT and DELETE run in a read-write transaction (database.run_in_transaction, or a begun "
                    "transaction), not in a read-only one"
                )
            if isinstance(statement, ast.QueueInsert):
                return await self._insert(queue, statement, params, use, ns)
            return await self._delete(queue, statement, params, use, ns)
        except errors.QueueError as exc:
            await self.names.shown_in(exc, queue)
            raise

    async def _select(self, queue: QueueDef, s: ast.QueueSelect, params: Params, use: Use) -> Result:
        spelling = await self.names.of(queue)
        available = message_columns(queue, spelling)
        chosen, columns = project(available, s.columns, f"queue {spelling.queue!r}")
        key_types = {c.name: c.type for c in queue.key_columns}
        key_equals, bounds = [], []
        for cond in s.where:
            column = SYSTEM_COLUMNS.get(cond.column, cond.column)
            what = f"the condition on {cond.column!r}"
            if column in key_types:
                if cond.op != "=":
                    raise errors.InvalidArgument(f"{what}: key columns compare with = only")
                key_equals.append((column, self._value(cond.value, key_types[column], params, what)))
            elif column == "deliver_time":
                at, offset = self._instant(cond.value, params, what)
                bounds.append((cond.op, at, offset))
            else:
                raise errors.InvalidArgument(f"{what}: conditions may name key columns (=) and DeliverTime only")
        order_by = None
        if s.order_by is not None:
            order_by = SYSTEM_COLUMNS.get(s.order_by, s.order_by)
            if order_by == "payload":
                raise errors.InvalidArgument("ORDER BY takes a key column or DeliverTime")
        limit = None
        if s.limit is not None:
            limit = self._value(s.limit, ColumnType.INT64, params, "LIMIT")
            if limit < 0:
                raise errors.InvalidArgument("LIMIT cannot be negative")
        query: dict[str, Any] = dict(key_equals=key_equals, deliver_time_bounds=bounds, order_by=order_by,
                     descending=s.descending, limit=limit,
                     key_descending=[spelling.descending(c.name) for c in queue.key_columns])
        if use.read_only:
            found = await self._operator.select(queue, **query)
        else:
            found = await (await use.hold()).select(queue, **query)
        rows = []
        for key, payload, deliver_time in found:
            row = [values.encode(v, c.type) for v, c in zip(key, queue.key_columns)]
            row += [values.encode(payload, queue.payload_type), values.encode(deliver_time, ColumnType.TIMESTAMP)]
            rows.append([row[i] for i in chosen])
        return Result(columns, rows)

    async def _renew(self, queue: QueueDef, s: ast.RenewLease, params: Params, use: Use) -> Result:
        # A token named twice gets one row, as spanq.renewlease_<q> answers: the result is a
        # table of leases, keyed by the old token (Spanner documents nothing on duplicates).
        tokens = list(dict.fromkeys(self._tokens(s.lease_tokens, params)))
        spelling = await self.names.of(queue)
        available = [Output(fold(n), spelling.system(n), t) for n, t in RENEW_COLUMNS]
        chosen, columns = project(available, s.columns, "RENEWLEASE")
        result = await self._renew_all(queue, tokens, use)
        return Result(columns, [[row[i] for i in chosen] for row in result.rows])

    async def _renew_all(self, queue: QueueDef, tokens: list[str], use: Use) -> Result:
        op = RenewOp(queue=queue, lease_tokens=tokens, lease_duration=queue.lease_duration)

        def rows_of(renewed: list[Any]) -> list[list[struct_pb2.Value]]:
            return [
                [values.encode(r.old_lease_token, ColumnType.STRING),
                 values.encode(r.new_lease_token, ColumnType.STRING),
                 values.encode(r.lease_expiration_time, ColumnType.TIMESTAMP)]
                for r in renewed if r.known  # an unrenewable token's row has NULLs, as in Spanner
            ]

        if not use.read_only:
            return Result(list(RENEW_COLUMNS), rows_of((await (await use.hold()).apply([op]))[0]))
        # Under a read-only transaction RENEWLEASE commits on its own, like RECEIVE's
        # leases, through the commit ledger: an unknown outcome is settled there.
        answer = await self._once.commit_unattended(
            "spanner.RENEWLEASE", "\0".join([queue.name, *tokens]).encode(), [op], _RenewedRows(rows_of),
            id_prefix="spanner-renew", attempts=RENEW_ATTEMPTS,
            gave_up="RENEWLEASE could not commit; nothing was renewed, retry")
        return Result(list(RENEW_COLUMNS), answer.reply)

    async def generated_written(self, queue: QueueDef, named: str | None = None) -> errors.QueueError:
        """A write that gives a generated key column a value (an INSERT naming it, a Send of the
        whole key): FAILED_PRECONDITION in Spanner's words, naming the column as declared."""
        spelling = await self.names.of(queue)
        column = named or next(c.name for c in queue.key_columns if c.generated_as is not None)
        return errors.FailedPrecondition(
            f"Cannot write into generated column `{spelling.queue}.{spelling.column(column)}`. (spanq: the database "
            "computes it from the other key columns; a send gives only those)", column=column)

    async def _insert(self, queue: QueueDef, s: ast.QueueInsert, params: Params, use: Use, ns: Scope) -> Result:
        spelling = await self.names.of(queue)
        key_names = [c.name for c in queue.sent_key_columns]
        generated = {c.name for c in queue.key_columns if c.generated_as is not None}
        positions: dict[str, int] = {}
        for i, name in enumerate(s.columns):
            column = SYSTEM_COLUMNS.get(name, name)
            if column in generated:
                raise await self.generated_written(queue, column)
            if column not in key_names and column not in ("payload", "deliver_time"):
                raise errors.InvalidArgument(f"queue {spelling.queue!r} has no column {name!r}; a send names the "
                                             f"key columns ({', '.join(map(spelling.column, key_names))}), "
                                             f"{spelling.column('payload')} and optionally DeliverTime")
            if column in positions:
                raise errors.InvalidArgument(f"column {name!r} is named twice")
            positions[column] = i
        missing = [n for n in key_names + ["payload"] if n not in positions]
        if missing:
            raise errors.InvalidArgument(f"INSERT INTO {spelling.queue} must give "
                                         f"{', '.join(map(spelling.column, missing))}")
        chosen: list[int] = []
        returned: list[tuple[str, values.Shown]] = []
        if s.returning is not None:
            available = message_columns(queue, spelling)
            chosen, returned = project(available, s.returning, f"queue {spelling.queue!r}")
            if any(available[i].key == "delivertime" for i in chosen):
                # The deliver time is the database's clock's, known only once the send is stored.
                raise errors.InvalidArgument(f"INSERT INTO {spelling.queue} ... THEN RETURN takes the key columns and "
                                             f"{spelling.column('payload')}, not DeliverTime; read it with SELECT")
        messages = []
        for r, row in enumerate(s.rows):
            where = f"row {r}"
            key = tuple(self._value(row[positions[c.name]], c.type, params, f"{where}: column {c.name!r}")
                        for c in queue.sent_key_columns)
            payload = self._value(row[positions["payload"]], queue.payload_type, params, f"{where}: Payload")
            await self.check_payload(queue, payload, ns, f"{where}: Payload")
            deliver_time, delay = None, None
            if "deliver_time" in positions:
                at, offset = self._instant(row[positions["deliver_time"]], params, f"{where}: DeliverTime")
                if at is not None:
                    deliver_time = at + offset
                elif offset > timedelta(0):
                    delay = offset
            messages.append(OutgoingMessage(key=key, payload=payload, deliver_time=deliver_time, delay=delay))
        keys = (await (await use.hold()).apply([SendOp(queue=queue, messages=messages)]))[0]
        rows: Rows = []
        for m, whole in zip(messages, keys) if s.returning is not None else ():
            written = [values.encode(v, c.type) for v, c in zip(whole, queue.key_columns)]  # type: ignore[arg-type]
            written.append(values.encode(m.payload, queue.payload_type))
            rows.append([written[i] for i in chosen])
        return Result(returned, rows, row_count=len(messages))

    async def _delete(self, queue: QueueDef, s: ast.QueueDelete, params: Params, use: Use,
                      ns: Scope) -> "Result | TableResult":
        key_types = {c.name: c.type for c in queue.key_columns}
        by_key = [c for c in s.where if c.column in key_types and c.op == "="]
        if len(by_key) != len(s.where) or {c.column for c in by_key} != set(key_types) \
                or len(by_key) != len(key_types):
            # Not one message by its key: a direct delete of the messages the WHERE finds.
            where = tuple(ast.Compare(c.op, ast.Column(PG_SYSTEM.get(c.column, c.column)), c.value) for c in s.where)
            statement = ast.Delete(ast.Relation(s.queue), where[0] if len(where) == 1 else ast.Logical("AND", where))
            return await self._direct_delete(queue, statement, params, None, use, ns, s.assert_rows_modified)
        given = {c.column: self._value(c.value, key_types[c.column], params, f"the condition on {c.column!r}")
                 for c in by_key}
        key = tuple(given[c.name] for c in queue.key_columns)
        expected = s.assert_rows_modified

        def check(results: list[Any]) -> None:
            deleted = sum(1 for r in results[0] if r.acked)
            if expected is not None and deleted != expected:
                raise RowCountMismatch(
                    f"ASSERT_ROWS_MODIFIED {expected}: the DELETE modified {deleted} row(s) of queue "
                    f"{queue.name!r} (key {list(key)!r}: the message is gone, already acknowledged or deleted). "
                    "The statement changed nothing; the transaction is still open: roll it back"
                )

        op = AckOp(queue=queue, items=[AckItem(key=key)], ignore_not_found=True)
        results = await (await use.hold()).apply([op], check=check)
        return Result([], [], row_count=sum(1 for r in results[0] if r.acked))

    async def _direct_delete(self, queue: QueueDef, s: ast.Delete, params: Params, param_types: Any, use: Use,
                             ns: Scope, expected: int | None = None) -> TableResult:
        """DELETE of a queue's messages by any WHERE (Spanner: "Direct DELETE or UPDATE statements
        bypass the queue leasing and delivery state machine"): the messages the WHERE finds, read
        as the table subset reads a queue, are acked by key in the same transaction, whatever
        their lease; an unrenewable lease token is what is left of a leased one. As partitioned
        DML, each batch of keys commits on its own."""
        relation = s.table
        keys = tuple(ast.SelectItem(ast.Column(c.name, relation.shown)) for c in queue.key_columns)
        width = len(keys)
        limit = self._mutator.limits.max_messages_per_request
        select = ast.Select(keys + (s.returning or ()), relation, where=s.where)

        def acked(rows: list[list[struct_pb2.Value]]) -> list[AckOp]:
            items = [AckItem(key=tuple(values.decode(v, c.type, f"key column {c.name!r}")
                                       for v, c in zip(row, queue.key_columns))) for row in rows]
            return [AckOp(queue=queue, items=items[i:i + limit], ignore_not_found=True)
                    for i in range(0, len(items), limit)]

        if use.partitioned:
            if s.returning is not None:
                raise errors.InvalidArgument("partitioned DML takes UPDATE and DELETE without THEN RETURN "
                                             "(as in Spanner)")
            batch = dataclasses.replace(select, items=keys, limit=ast.Literal(limit, ast.INT64))
            total = idle = 0
            while True:  # a batch at a time, each its own commit, until the WHERE finds none
                found = await self.tables.run(batch, params, param_types, _STRONG_READ, ns)
                if not found.rows:
                    return TableResult([], [], total, lower_bound=True)
                answer = await self._once.commit_unattended(
                    "spanner.DELETE", queue.name.encode(), acked(found.rows), _AckedCount(),
                    id_prefix="spanner-delete", attempts=RENEW_ATTEMPTS,
                    gave_up="the partitioned DELETE could not commit a batch; run it again")
                idle = idle + 1 if not answer.reply else 0
                if idle > 1:  # twice, what it found was gone by the ack (acked by others): never spin
                    return TableResult([], [], total, lower_bound=True)
                total += answer.reply
        if use.read_only:
            raise errors.InvalidArgument("DML runs in a read-write transaction (database.run_in_transaction) or as "
                                         "partitioned DML (database.execute_partitioned_dml), not in a read-only one")
        found = await self.tables.run(select, params, param_types, use, ns)
        ops = acked(found.rows)

        def check(results: list[Any]) -> None:
            deleted = sum(1 for acks in results for r in acks if r.acked)
            if expected is not None and deleted != expected:
                raise RowCountMismatch(
                    f"ASSERT_ROWS_MODIFIED {expected}: the DELETE modified {deleted} row(s) of queue "
                    f"{queue.name!r}. The statement changed nothing; the transaction is still open: roll it back")

        results = await (await use.hold()).apply(ops, check=check) if ops else []
        if not ops:
            check([])
        gone = {tuple(op.items[i].key) for op, acks in zip(ops, results) for i, r in enumerate(acks) if r.acked}
        rows = [row[width:] for row, op_key in zip(found.rows, (k.key for op in ops for k in op.items))
                if op_key in gone]
        return TableResult(found.columns[width:], rows, len(gone))

    # -- Read / StreamingRead ----------------------------------------------------------

    async def read(self, request: Any, use: Use, ns: Scope) -> Result:
        """Read of a queue (a google.spanner.v1.ReadRequest): the messages of the KeySet's keys, or
        all of them in key order, without leasing; as a SELECT of the same columns would.
        A Read of a table is the table's (tables.py)."""
        if await self.tables.is_table(ns, fold(request.table)):
            return await self.tables.read(request, use, ns)  # type: ignore[return-value]
        queue = await self.queue(ns, fold(request.table))
        spelling = await self.names.of(queue)
        if request.index:
            raise errors.InvalidArgument(f"Read of queue {spelling.queue!r}: queues have no secondary index "
                                         f"to read by ({request.index!r}); read by key")
        if not request.columns:
            raise errors.InvalidArgument("Read needs the columns to return")
        if request.key_set.ranges:
            raise errors.InvalidArgument(f"Read of queue {spelling.queue!r}: key ranges are not supported; give "
                                         "keys, or all")
        if request.limit < 0:
            raise errors.InvalidArgument("Read's limit cannot be negative")
        items = tuple(ast.Item(fold(c)) for c in request.columns)
        limit = ast.Literal(request.limit, ast.INT64) if request.limit else None
        if request.key_set.all_:  # "all" in the proto; proto-plus names it all_; in key order, as declared
            return await self._select(queue, ast.QueueSelect(queue.name, items, limit=limit), struct_pb2.Struct(), use)
        result: Result | None = None
        rows: list[list[struct_pb2.Value]] = []
        for i, key in enumerate(request.key_set.keys):
            if len(key.values) != len(queue.key_columns):
                raise errors.InvalidArgument(
                    f"key {i}: queue {spelling.queue!r} has {len(queue.key_columns)} key column(s) "
                    f"({', '.join(spelling.column(c.name) for c in queue.key_columns)}), the key has "
                    f"{len(key.values)} value(s)")
            params = struct_pb2.Struct()
            where = []
            for j, (column, v) in enumerate(zip(queue.key_columns, key.values)):
                params.fields[f"k{j}"].CopyFrom(v)
                where.append(ast.Condition(column.name, "=", ast.Param(f"k{j}")))
            result = await self._select(queue, ast.QueueSelect(queue.name, items, tuple(where)), params, use)
            rows += result.rows
            if request.limit and len(rows) >= request.limit:
                break
        if result is None:  # no keys: no rows, and the columns still named
            result = await self._select(queue, ast.QueueSelect(queue.name, items, limit=ast.Literal(0, ast.INT64)),
                                        struct_pb2.Struct(), use)
        return Result(result.columns, rows[:request.limit or None])

    # -- RECEIVE --------------------------------------------------------------------

    async def receive(self, s: ast.Receive, params: Params, ns: Scope = DEFAULT_SCOPE) -> "ReceiveStream":
        try:
            queue = await self.queue(ns, s.queue, fresh=True)
        except errors.QueueNotFound:
            # Spanner's analyzer finds no such table function: INVALID_ARGUMENT, in its words.
            raise errors.InvalidArgument(f"Table-valued function not found: RECEIVE_{s.queue}") from None
        duration = DEFAULT_RECEIVE_DURATION
        if s.args.get("max_duration", ast.Literal(None, None)) != ast.Literal(None, None):
            text = self._value(s.args["max_duration"], ColumnType.STRING, params, "max_duration")
            duration = parser.duration(text, "max_duration")
            if not timedelta(0) < duration <= MAX_STREAM_DURATION:
                raise errors.InvalidArgument("max_duration must be more than 0 and at most 1h")
        batch = DEFAULT_RECEIVE_BATCH
        if "max_batch_size" in s.args and s.args["max_batch_size"] != ast.Literal(None, None):
            batch = self._value(s.args["max_batch_size"], ColumnType.INT64, params, "max_batch_size")
            if not 1 <= batch <= MAX_BATCH:
                raise errors.InvalidArgument(f"max_batch_size must be between 1 and {MAX_BATCH}")
        if "priority" in s.args and s.args["priority"] != ast.Literal(None, None):
            self._priority(s.args["priority"], params)
        spelling = await self.names.of(queue)
        available = message_columns(queue, spelling)
        available += [Output(fold(n), spelling.system(n), t) for n, t in RECEIVE_COLUMNS]
        chosen, columns = project(available, s.columns, f"RECEIVE_{spelling.queue}")
        keep = self._filter(queue, spelling, s.where, params)
        stream = self._receiver.stream(queue, ReceiveOptions(max_batch_size=batch, max_duration=duration))
        return ReceiveStream(queue, columns, chosen, keep, stream, self._receiver)

    def _priority(self, expr: ast.Value, params: Params) -> str:
        """Spanner's RECEIVE priority: accepted and checked, and changes nothing (its values are Spanner's
        request priorities, not a choice of messages); messages' own priorities order delivery as on
        spanq.v1 (docs/spanner-compat.md)."""
        if isinstance(expr, ast.Literal) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
            return str(expr.value)
        text = self._value(expr, ColumnType.STRING, params, "priority")
        if text.lower() not in dialects.PRIORITIES:
            raise errors.InvalidArgument(f"priority must be one of {', '.join(map(repr, dialects.PRIORITIES))} "
                                         f"(in any case), got {text[:40]!r}")
        return text.lower()

    def _filter(self, queue: QueueDef, spelling: Spelling, where: tuple[ast.Condition, ...],
                params: Params) -> Callable[[LeasedMessage], bool] | None:
        """RECEIVE's WHERE as a test of a leased message, its values resolved once (CURRENT_TIMESTAMP()
        is the query's start, as in Spanner); None without a WHERE."""
        if not where:
            return None
        key_at = {c.name: i for i, c in enumerate(queue.key_columns)}
        key_types = {c.name: c.type for c in queue.key_columns}
        tests: list[Callable[[LeasedMessage], bool]] = []
        for cond in where:
            column = SYSTEM_COLUMNS.get(cond.column, cond.column)
            what = f"the condition on {cond.column!r}"
            compare = COMPARE[cond.op]
            if column in key_types:
                wanted = self._value(cond.value, key_types[column], params, what)
                at = key_at[column]
                tests.append(lambda m, c=compare, w=wanted, i=at: bool(c(m.key[i], w)))  # type: ignore[misc]
            elif column == "payload":
                if spelling.proto:  # as Spanner defines no comparison of PROTO values
                    raise errors.InvalidArgument(f"{what}: a {spelling.proto} {spelling.column('payload')} (PROTO) "
                                                 "cannot be compared")
                if queue.payload_type is ColumnType.JSON:
                    raise errors.InvalidArgument(f"{what}: a JSON {spelling.column('payload')} cannot be compared "
                                                 "in RECEIVE's WHERE")
                wanted = self._value(cond.value, queue.payload_type, params, what)
                tests.append(lambda m, c=compare, w=wanted: bool(c(m.payload, w)))  # type: ignore[misc]
            elif column == "deliver_time":
                at_time, offset = self._instant(cond.value, params, what)
                instant = (at_time or self._clock.now() or datetime.now(timezone.utc)) + offset
                tests.append(lambda m, c=compare, w=instant: bool(c(m.deliver_time, w)))  # type: ignore[misc]
            else:
                raise errors.InvalidArgument(
                    f"{what}: RECEIVE's WHERE may name the key columns "
                    f"({', '.join(map(spelling.column, key_types))}), {spelling.column('payload')} and DeliverTime")
        return lambda m: all(test(m) for test in tests)

    @staticmethod
    def receive_row(queue: QueueDef, m: LeasedMessage) -> list[struct_pb2.Value]:
        row = [values.encode(v, c.type) for v, c in zip(m.key, queue.key_columns)]
        row += [
            values.encode(m.payload, queue.payload_type),
            values.encode(m.deliver_time, ColumnType.TIMESTAMP),
            values.encode(m.lease_expiration_time, ColumnType.TIMESTAMP),
            values.encode(m.lease_token, ColumnType.STRING),
            values.encode(m.last_batch_message, ColumnType.BOOL),
        ]
        return row

    # -- DDL ------------------------------------------------------------------------

    async def ddl(self, statement: ast.Ddl, database: str | None = None,
                  ns: Scope = DEFAULT_SCOPE, descriptors: bytes = b"") -> str | None:
        """Applies one DDL statement of ``database`` in its namespace ``ns`` (``descriptors``: the
        request's proto descriptors); returns the queue it created, if any."""
        if isinstance(statement, ast.ProtoBundle):
            await self.protos.ddl(statement, database, descriptors, self._proto_types_in_use)
            return None
        if isinstance(statement, ast.AlterQueue):
            await self._alter(statement, database, ns)
            return None
        if isinstance(statement, (ast.CreateRole, ast.DropRole, ast.Grant, ast.GrantRole)):
            async def exists(kind: str, name: str) -> bool:
                if kind == "queue":
                    return ns.owns(name) and await self._catalog.exists(ns.prefix + name)
                return await self.tables.is_table(ns, name)

            await self.roles.ddl(statement, database, exists)
            return None
        if not isinstance(statement, (ast.CreateQueue, ast.DropQueue)):
            await self.tables.ddl(statement, database, ns)
            if isinstance(statement, ast.DropTable):
                await self.roles.forget(database, "table", statement.name)
            return None
        if isinstance(statement, ast.DropQueue):
            try:
                await self.queue(ns, statement.name)
                await self._catalog.drop(ns.prefix + statement.name)
            except errors.QueueNotFound:
                if not statement.if_exists:
                    raise
                return None
            await self.roles.forget(database, "queue", statement.name)
            return None
        queue = queue_from_ddl(statement)
        if statement.interleave_in and not await self._is_relation(ns, fold(statement.interleave_in)):
            raise errors.QueueNotFound(f"CREATE QUEUE: INTERLEAVE IN {statement.interleave_in}: Table not found: "
                                       f"{statement.interleave_in}")
        if not ns.owns(queue.name):
            raise errors.InvalidArgument(f"{queue.name!r} is not a name of this database: {RESERVED}")
        if statement.parent_table:
            await self._check_parent_order(statement, ns)
        if statement.payload_proto:
            await self.protos.message_type(database, statement.payload_proto, f"CREATE QUEUE {statement.name}")
        if ns.prefix:
            queues.check_name(queue.name, "queue name", queues.MAX_QUEUE_NAME - len(ns.prefix))
            parent = queue.parent_table
            if parent and (await self._catalog.exists(ns.prefix + parent)  # a queue of this database, or
                           or await self.tables.is_table(ns, parent)):  # a table of its; else a psql table
                parent = ns.prefix + parent
            queue = dataclasses.replace(queue, name=ns.prefix + queue.name, parent_table=parent)
        parent = queue.parent_table
        if parent and in_a_namespace(parent) and not (ns.prefix and parent.startswith(ns.prefix)):
            raise errors.InvalidArgument(f"INTERLEAVE IN PARENT {queue.parent_table}: another database's "
                                         f"table ({RESERVED})")
        try:
            await self._catalog.create(queue)
        except errors.QueueAlreadyExists:
            # A no-op only when it is a queue that exists, not a table or index in the way.
            if statement.if_not_exists and await self._catalog.exists(queue.name):
                return None
            raise
        await self.names.record(queue.name, database, Spelling.of_ddl(statement, ns.pg))
        return queue.name

    async def _check_parent_order(self, s: ast.CreateQueue, ns: Scope) -> None:
        """A queue INTERLEAVE IN PARENT a table (or queue) of the database starts its key with the
        parent's in the parent's order, as Spanner asks of an interleaved child: rows of one parent
        are together, in one order (a DESC column of the parent is DESC in the queue)."""
        assert s.parent_table is not None
        parent = (await self.tables.schema(ns, [s.parent_table])).get(s.parent_table)
        if parent is None:
            return  # not the database's: the catalog's checks say what is wrong
        mine = [(k, k in s.descending) for k in s.primary_key]
        theirs = [(c.name, d) for c, d in parent.key_order]
        if any(d != e for (_, d), (_, e) in zip(mine, theirs)):
            raise errors.FailedPrecondition(
                f"CREATE QUEUE {dict(s.spelled).get(s.name, s.name)}: INTERLEAVE IN PARENT {parent.spelled}: "
                f"the queue's key must start with the parent's in its order ({', '.join(c.spelled + (' DESC' if d else '') for c, d in parent.key_order)})")
    async def _proto_types_in_use(self, database: str) -> dict[str, str]:
        """The proto types a database's tables and queues use, each with a column or queue that does."""
        used = await self.tables.proto_columns(database)
        for name in await self._records.database_queues(database):
            try:
                spelling = await self.names.of(await self._catalog.get(name, fresh=True))
            except errors.QueueNotFound:
                continue  # dropped meanwhile
            if spelling.proto:
                used.setdefault(spelling.proto, f"queue {spelling.queue}")
        return used

    async def check_payload(self, queue: QueueDef, payload: Any, ns: Scope, what: str) -> None:
        """Refuses a payload of a queue whose Payload is a proto message type when it does not
        parse as that message (INVALID_ARGUMENT naming the queue and the type)."""
        spelling = await self.names.of(queue)
        if spelling.proto:
            await self.protos.check(ns.database, spelling.proto, payload, f"{what} of queue {spelling.queue!r}")

    async def _is_relation(self, ns: Scope, name: str) -> bool:
        """Whether a (folded) name is a table or a queue of the database."""
        return await self.tables.is_table(ns, name) or ns.owns(name) and await self._catalog.exists(ns.prefix + name)

    async def _alter(self, s: ast.AlterQueue, database: str | None, ns: Scope) -> None:
        """ALTER QUEUE: the pauses and the retention are the queue's own settings (the domain's
        UpdateQueue: every front-end sees them at once); the locality group, receive mode and
        INTERLEAVE IN without PARENT are what GetDatabaseDdl lists (the spelling's record)."""
        queue = await self.queue(ns, s.name, fresh=True)
        spelling = await self.names.of(queue)
        shown = f"ALTER QUEUE {spelling.queue}"
        changes: dict[str, Any] = {}
        ddl = dict(spelling.ddl)
        if s.options is not None:
            o = s.options
            for name in ("disable_send", "disable_delivery"):
                if getattr(o, name) is not None or name in o.reset:
                    changes[name] = bool(getattr(o, name))
            if o.locality_group is not None or "locality_group" in o.reset:
                ddl["locality_group"] = o.locality_group
            if o.receive_mode or "receive_mode" in o.reset:
                ddl["receive_mode"] = "receive_mode" not in o.reset
        elif s.on_delete_cascade is not None:
            if not queue.parent_table:
                raise errors.FailedPrecondition(f"{shown} SET ON DELETE: the queue is not INTERLEAVE IN PARENT a "
                                                "table")
            if s.on_delete_cascade != queue.parent_on_delete_cascade:
                raise errors.FailedPrecondition(
                    f"{shown} SET ON DELETE {'CASCADE' if s.on_delete_cascade else 'NO ACTION'}: spanq cannot change "
                    "a live queue's ON DELETE (its table's foreign key); drop the queue and create it again")
        elif s.interleave is not None:
            table, in_parent = s.interleave
            parent = queue.parent_table.removeprefix(ns.prefix) if queue.parent_table else None
            if in_parent and parent != fold(table) or not in_parent and parent is not None:
                raise errors.FailedPrecondition(
                    f"{shown} SET INTERLEAVE IN{' PARENT' if in_parent else ''} {table}: spanq cannot change a live "
                    "queue's parent (INTERLEAVE IN PARENT is a foreign key of its table); drop the queue and create "
                    "it again")
            if not in_parent:
                if not await self._is_relation(ns, fold(table)):
                    raise errors.QueueNotFound(f"{shown} SET INTERLEAVE IN {table}: Table not found: {table}")
                ddl["interleave_in"] = table  # locality only: nothing to change but what is listed
        else:
            has = queue.message_retention_duration is not None
            replace, add = ("ALTER TTL", "ADD TTL") if spelling.pg else ("REPLACE ROW DELETION POLICY",
                                                                         "ADD ROW DELETION POLICY")
            if s.row_deletion == "add" and has:
                raise errors.FailedPrecondition(f"{shown}: the queue already has a row deletion policy; use {replace}")
            if s.row_deletion != "add" and not has:
                raise errors.FailedPrecondition(f"{shown}: the queue has no row deletion policy; use {add}")
            types = {c.name: c.type for c in queue.key_columns}
            changes["message_retention_duration"] = (retention(s.policy, types, spelling.queue)
                                                     if s.policy is not None else None)
        if changes:
            try:
                await self._catalog.update(queue.name, changes)
            except errors.QueueError as exc:
                await self.names.shown_in(exc, queue)
                raise
        if ddl != spelling.ddl:
            await self.names.record(queue.name, database,
                                    dataclasses.replace(spelling, ddl={k: v for k, v in ddl.items() if v}))

    # -- values -----------------------------------------------------------------------

    def _value(self, expr: ast.Expr, column_type: ColumnType, params: Params, what: str) -> Any:
        if isinstance(expr, ast.Param):
            if expr.name not in params.fields:
                raise errors.InvalidArgument(f"{what}: no value was given for parameter @{expr.name}")
            return values.decode(params.fields[expr.name], column_type, f"{what} (@{expr.name})")
        if isinstance(expr, ast.Literal):
            v = expr.value
            if v is None:
                raise errors.InvalidArgument(f"{what} cannot be NULL")
            if column_type is ColumnType.INT64 and isinstance(v, int) and not isinstance(v, bool):
                return values.int64(str(v), what)
            if column_type is ColumnType.BOOL and isinstance(v, bool):
                return v
            if column_type is ColumnType.STRING and isinstance(v, str):
                return v
            if column_type is ColumnType.BYTES and isinstance(v, (bytes, str)):
                return v if isinstance(v, bytes) else v.encode()
            if column_type is ColumnType.JSON and isinstance(v, str):
                return values.decode(struct_pb2.Value(string_value=v), column_type, what)
            if column_type is ColumnType.TIMESTAMP and isinstance(v, str):
                return values.timestamp(v, what)
        if isinstance(expr, ast.TypedLiteral) and column_type is ColumnType.TIMESTAMP:
            return values.timestamp(expr.text, what)
        raise errors.InvalidArgument(f"{what}: this value does not fit a {column_type.value} column")

    def _instant(self, expr: ast.Value, params: Params, what: str) -> tuple[datetime | None, timedelta]:
        """(instant, offset); instant None means now."""
        if isinstance(expr, ast.Now):
            return None, expr.offset
        return self._value(expr, ColumnType.TIMESTAMP, params, what), timedelta(0)

    def _tokens(self, expr: ast.Value, params: Params) -> list[str]:
        if isinstance(expr, ast.Param):
            if expr.name not in params.fields:
                raise errors.InvalidArgument(f"lease_tokens: no value was given for parameter @{expr.name}")
            tokens = values.string_list(params.fields[expr.name], f"lease_tokens (@{expr.name})")
        elif isinstance(expr, ast.ArrayLiteral):
            tokens = [self._value(item, ColumnType.STRING, params, "a lease token") for item in expr.items]
        else:
            raise errors.InvalidArgument("lease_tokens must be an array: lease_tokens => ['token', ...] or @tokens")
        if not tokens:
            raise errors.InvalidArgument("lease_tokens is empty")
        return tokens


def message_columns(queue: QueueDef, spelling: Spelling) -> list[Output]:
    """A queue's own columns: its key, Payload and DeliverTime."""
    found = [Output(c.name, spelling.column(c.name), c.type, spelling.hidden(c.name)) for c in queue.key_columns]
    payload: values.Shown = values.Proto(spelling.proto) if spelling.proto else queue.payload_type
    return found + [Output("payload", spelling.column("payload"), payload, spelling.hidden("payload")),
                    Output("delivertime", spelling.column("delivertime"), ColumnType.TIMESTAMP)]


class ReceiveStream:
    """RECEIVE's rows, batch by batch: filtered by its WHERE (a message that fails it is
    given back at once, its attempt count as before) and projected onto its SELECT list.
    Only those are given back, before any row of their batch is yielded: a row yielded is
    the transport's (receive.py's lease-safety rule), and the rows of a stream that ends
    keep their leases."""

    def __init__(self, queue: QueueDef, columns: list[tuple[str, values.Shown]], chosen: list[int],
                 keep: Callable[[LeasedMessage], bool] | None, stream: AsyncIterator[list[LeasedMessage]],
                 receiver: Receiver) -> None:
        self.queue = queue
        self.columns = columns
        self._chosen = chosen
        self._keep = keep
        self._stream = stream
        self._receiver = receiver

    async def batches(self) -> AsyncIterator[list[list[struct_pb2.Value]]]:
        try:
            async for batch in self._stream:
                kept = batch
                if self._keep is not None:
                    kept = [m for m in batch if self._keep(m)]
                    others = [m for m in batch if not self._keep(m)]
                    if others:
                        await self._receiver.give_back(self.queue, others)
                    if not kept:
                        await asyncio.sleep(FILTERED_PAUSE)
                        continue
                    # SpannerLastBatchMessage marks the last row sent of the batch.
                    kept = [m._replace(last_batch_message=i == len(kept) - 1) for i, m in enumerate(kept)]
                rows = [Executor.receive_row(self.queue, m) for m in kept]
                yield [[row[i] for i in self._chosen] for row in rows]
        finally:
            await self._stream.aclose()  # type: ignore[attr-defined]


def queue_from_ddl(s: ast.CreateQueue) -> QueueDef:
    types = {}
    for name, column_type in s.columns:
        if name in types:
            raise errors.InvalidArgument(f"CREATE QUEUE {s.name}: column {name!r} is defined twice")
        types[name] = column_type
    if "payload" not in types:
        raise errors.InvalidArgument(f"CREATE QUEUE {s.name} needs a Payload column (BYTES, STRING or JSON)")
    if "payload" in s.primary_key:
        raise errors.InvalidArgument("Payload cannot be part of the primary key")
    for name in s.primary_key:
        if name not in types:
            raise errors.InvalidArgument(f"CREATE QUEUE {s.name}: primary-key column {name!r} is not defined")
    extra = [n for n in types if n not in s.primary_key and n != "payload"]
    if extra:
        raise errors.InvalidArgument(
            f"CREATE QUEUE {s.name}: a queue has only its primary-key columns and Payload; {', '.join(extra)} "
            "would be neither"
        )
    if len(set(s.primary_key)) != len(s.primary_key):
        raise errors.InvalidArgument(f"CREATE QUEUE {s.name}: a primary-key column is named twice")
    return QueueDef(
        name=s.name,
        key_columns=generated_key_columns(s, types),
        payload_type=types["payload"],
        lease_duration=queues.DEFAULT_LEASE,
        initial_backoff=queues.DEFAULT_INITIAL_BACKOFF,
        max_backoff=queues.DEFAULT_MAX_BACKOFF,
        parent_table=s.parent_table,
        parent_on_delete_cascade=s.on_delete_cascade,
        disable_send=bool(s.options.disable_send),
        disable_delivery=bool(s.options.disable_delivery),
        message_retention_duration=retention(s.row_deletion, types, s.name) if s.row_deletion else None,
    )


def generated_key_columns(s: ast.CreateQueue, types: dict[str, ColumnType]) -> tuple[KeyColumn, ...]:
    """The queue's key columns, a generated one (AS (expr) STORED) with its expression as
    GetDatabaseDdl lists it and as PostgreSQL computes it: it reads the other key columns only
    (a send gives those), and deterministically (postgres.generation says what it takes)."""
    expressions = dict(s.generated)
    if "payload" in expressions:
        raise errors.InvalidArgument(f"CREATE QUEUE {s.name}: Payload cannot be a generated column")
    spelled = dict(s.spelled)
    readable = {n: (n, ast.SpannerType(types[n].value)) for n in s.primary_key if n not in expressions}
    columns = []
    for name in s.primary_key:
        expr = expressions.get(name)
        if expr is None:
            columns.append(KeyColumn(name, types[name]))
            continue
        what = f"CREATE QUEUE {spelled.get(s.name, s.name)}: generated column {spelled.get(name, name)}"
        generated_sql = postgres.generation(expr, readable, ast.SpannerType(types[name].value), what)
        columns.append(KeyColumn(name, types[name], ast.googlesql(expr), generated_sql))
    return tuple(columns)


MAX_RETENTION_DAYS = queues.MAX_RETENTION.days


def retention(policy: ast.RowDeletionPolicy, types: dict[str, ColumnType], queue: str) -> timedelta:
    """A queue's ROW DELETION POLICY as the domain's message_retention_duration: messages are
    deleted ``days`` after they were sent. Its column must be the queue's DeliverTime (a
    message's time, which spanq ages from its send: see docs/spanner-compat.md); a key
    column holds the sender's value, which spanq's retention does not read."""
    what = f"queue {queue}: ROW DELETION POLICY"
    if policy.column not in ("delivertime", "deliver_time"):
        if types.get(policy.column) is ColumnType.TIMESTAMP:
            raise errors.InvalidArgument(
                f"{what}: OLDER_THAN({policy.column}, ...) names a key column; spanq deletes a queue's unacknowledged "
                "messages by the time they were sent only: name DeliverTime (deliver_time in PostgreSQL)")
        raise errors.InvalidArgument(f"{what}: OLDER_THAN takes the queue's DeliverTime column (a TIMESTAMP), not "
                                     f"{policy.column!r}")
    if not 1 <= policy.days <= MAX_RETENTION_DAYS:
        raise errors.InvalidArgument(f"{what}: INTERVAL {policy.days} DAY; spanq keeps messages 1 to "
                                     f"{MAX_RETENTION_DAYS} days (message_retention_duration)")
    return timedelta(days=policy.days)


def queue_ddl(queue: QueueDef, spelling: Spelling | None = None, ns: str = "",
              declared: dict[str, str] | None = None) -> str:
    """A queue's definition as DDL of its database's dialect (for GetDatabaseDdl), its names as declared
    (``declared``: the declared names of the database's tables, by their PostgreSQL name)."""
    spelling = spelling or Spelling.folded(queue)
    parent = queue.parent_table
    if parent and declared and parent in declared:
        parent = declared[parent]
    elif parent and ns and parent.startswith(ns):
        parent = parent.removeprefix(ns)
    if spelling.pg:
        return _pg_queue_ddl(queue, spelling, parent)
    spelled = {ColumnType.INT64: "INT64", ColumnType.STRING: "STRING(MAX)", ColumnType.BYTES: "BYTES(MAX)",
               ColumnType.TIMESTAMP: "TIMESTAMP", ColumnType.BOOL: "BOOL", ColumnType.JSON: "JSON"}
    declared = spelling.ddl.get("types", {})

    def column(name: str, column_type: ColumnType, generated_as: str | None = None) -> str:
        line = f"  {spelling.column(name)} {declared.get(name) or spelled[column_type]}"
        if generated_as is None or name not in spelling.ddl.get("nullable", ()):
            line += " NOT NULL"
        if generated_as is not None:
            line += f" AS ({generated_as}) STORED"
        return line + (" HIDDEN" if spelling.hidden(name) else "")

    columns = ([column(c.name, c.type, c.generated_as) for c in queue.key_columns]
               + [column("payload", queue.payload_type)])
    text = f"CREATE QUEUE {spelling.queue} (\n" + ",\n".join(columns) + "\n) PRIMARY KEY ("
    text += ", ".join(spelling.column(c.name) + (" DESC" if spelling.descending(c.name) else "")
                      for c in queue.key_columns) + ")"
    if parent:
        text += f",\n  INTERLEAVE IN PARENT {parent} ON DELETE {_on_delete(queue)}"
    elif spelling.ddl.get("interleave_in"):
        text += f",\n  INTERLEAVE IN {spelling.ddl['interleave_in']}"
    return text + _ga_clauses(queue, spelling)


def _on_delete(queue: QueueDef) -> str:
    return "CASCADE" if queue.parent_on_delete_cascade else "NO ACTION"


def _ga_clauses(queue: QueueDef, spelling: Spelling) -> str:
    """A GoogleSQL queue's ROW DELETION POLICY and OPTIONS as GetDatabaseDdl lists them: the
    pauses and the retention as the catalog holds them now (UpdateQueue changes them too), the
    others as declared. A retention of no whole number of days (set through spanq.v1) has no
    Spanner form: it is left out."""
    text = ""
    days = _retention_days(queue)
    if days is not None:
        column = spelling.column("delivertime")
        text += f",\n  ROW DELETION POLICY (OLDER_THAN({column}, INTERVAL {days} DAY))"
    options = _listed_options(queue, spelling)
    return text + (f",\n  OPTIONS ({', '.join(options)})" if options else "")


def _retention_days(queue: QueueDef) -> int | None:
    retention = queue.message_retention_duration
    return retention.days if retention is not None and retention == timedelta(days=retention.days) else None


def _listed_options(queue: QueueDef, spelling: Spelling) -> list[str]:
    """A queue's options as both dialects list them (``name = value``)."""
    options = []
    if spelling.ddl.get("receive_mode"):
        options.append("receive_mode = 'PULL'")
    options += [f"{name} = true" for name in ("disable_send", "disable_delivery") if getattr(queue, name)]
    if spelling.ddl.get("locality_group"):
        options.append(f"locality_group = '{spelling.ddl['locality_group']}'")
    return options


def _pg_queue_ddl(queue: QueueDef, spelling: Spelling, parent: str | None) -> str:
    def name(text: str) -> str:  # PostgreSQL folds unquoted names: quote any other spelling
        return text if text == fold(text) and text.isidentifier() else '"' + text.replace('"', '""') + '"'

    spelled = {ColumnType.INT64: "bigint", ColumnType.STRING: "character varying", ColumnType.BYTES: "bytea",
               ColumnType.TIMESTAMP: "timestamp with time zone", ColumnType.BOOL: "boolean",
               ColumnType.JSON: "jsonb"}
    columns = [f"  {name(spelling.column(c.name))} {spelled[c.type]} NOT NULL" for c in queue.key_columns]
    columns.append(f"  {name(spelling.column('payload'))} {spelled[queue.payload_type]} NOT NULL")
    columns.append(f"  PRIMARY KEY({', '.join(name(spelling.column(c.name)) for c in queue.key_columns)})")
    text = f"CREATE QUEUE {name(spelling.queue)} (\n" + ",\n".join(columns) + "\n)"
    if parent:
        text += f" INTERLEAVE IN PARENT {name(parent)} ON DELETE {_on_delete(queue)}"
    elif spelling.ddl.get("interleave_in"):
        text += f" INTERLEAVE IN {name(spelling.ddl['interleave_in'])}"
    # PostgreSQL's forms of the row deletion policy (a table's TTL) and of the options (WITH)
    days = _retention_days(queue)
    if days is not None:
        text += f" TTL INTERVAL '{days} {'day' if days == 1 else 'days'}' ON {name(spelling.column('delivertime'))}"
    options = _listed_options(queue, spelling)
    return text + (f" WITH ({', '.join(options)})" if options else "")
