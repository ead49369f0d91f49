"""The gRPC translation for Spanner's own API: google.spanner.v1.Spanner,
google.spanner.admin.instance.v1.InstanceAdmin,
google.spanner.admin.database.v1.DatabaseAdmin and google.longrunning.Operations.

The message classes come from google-cloud-spanner (each proto-plus type's
``.pb()`` is the raw protobuf class); its descriptor pool has no service
descriptors, so the services are generic handlers over those classes. This
module only translates between protobuf and the domain and maps errors to
status codes, as Spanner's clients expect them.
"""

import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import grpc
from google.cloud.spanner_admin_database_v1.types import backup as dba_backup
from google.cloud.spanner_admin_database_v1.types import common as dba_common
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dba
from google.cloud.spanner_admin_instance_v1.types import spanner_instance_admin as ia
from google.cloud.spanner_v1.types import commit_response, result_set, spanner, transaction
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from ...domain import exactly_once
from ...domain.exactly_once import Answer, ExactlyOnce, Request
from ...domain.mutations import AckOp, Mutation, Mutator, SendOp, TableOp
from ...domain.operator import Operator
from ...domain.queues import Catalog
from ...domain.receive.stream import Receiver
from ...domain.records import Records
from ...edge import codec
from ...ground import errors
from ...ground.clock import Clock
from ...ground.model import AckItem, OutgoingMessage
from .. import DATABASE_ADMIN, INSTANCE_ADMIN, OPERATIONS, SPANNER
from ..port import TableStore
from ..query import ast, parser, values
from ..query.lexing import fold
from ..query.executor import Executor, Result, queue_ddl
from ..query.scope import Scope
from ..query.parser import Parsed
from ..query.tables import WRITES, TableResult
from . import access, sessions
from .admin import Admin, now_pb
from .status import SPANNER_ERRORS, NotFound
from .transactions import Transactions, Use, check_read_only

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-goog-spanner-request-id"

pb = spanner  # the request modules, read below as pb.X.pb()
CommitResponsePb = commit_response.CommitResponse.pb()
ResultSetPb = result_set.ResultSet.pb()
PartialResultSetPb = result_set.PartialResultSet.pb()
TransactionPb = transaction.Transaction.pb()


def request_intent(context: grpc.aio.ServicerContext) -> str | None:
    """The client's request id without its attempt number: the same on every retry
    of one intent (the Python client resends Commit with the same header)."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_HEADER and isinstance(value, str) and value:
            parts = value.split(".")
            intent = f"spanner:{'.'.join(parts[:5]) if len(parts) == 6 else value}"
            if len(intent) > exactly_once.MAX_REQUEST_ID or not intent.isprintable():
                # Keyed by a digest of the whole id, never a prefix: ids that share one are distinct requests.
                intent = f"spanner-sha256:{hashlib.sha256(intent.encode(errors='surrogatepass')).hexdigest()}"
            return intent
    return None


# -- the Spanner service ----------------------------------------------------------------


class CommitReply:
    """A Commit's response as the commit ledger records it (exactly_once.Reply): its
    commit timestamp, and with return_commit_stats its mutation count."""

    def __init__(self, mutation_count: int | None) -> None:
        self._count = mutation_count

    def encode(self, mutations: Sequence[Mutation], results: Sequence[Any]) -> tuple[Any, bytes]:
        reply = CommitResponsePb()
        reply.commit_timestamp.CopyFrom(now_pb())
        if self._count is not None:
            reply.commit_stats.mutation_count = self._count
        return reply, reply.SerializeToString()

    def replay(self, recorded: bytes) -> Any:
        return CommitResponsePb.FromString(recorded)


class SpannerService:
    def __init__(self, catalog: Catalog, mutator: Mutator, exactly_once_: ExactlyOnce, executor: Executor,
                 transactions: Transactions, admin: Admin) -> None:
        self._admin = admin
        self._catalog = catalog
        self._mutator = mutator
        self._once = exactly_once_
        self._executor = executor
        self._transactions = transactions

    # sessions
    async def CreateSession(self, request: Any, context: Any) -> Any:
        template = request.session if request.HasField("session") else None
        return sessions.new_session(request.database, template, await self._creator_role(request.database, template))

    async def BatchCreateSessions(self, request: Any, context: Any) -> Any:
        count = request.session_count
        if not 1 <= count <= sessions.MAX_BATCH_SESSIONS:
            raise errors.InvalidArgument(f"session_count must be between 1 and {sessions.MAX_BATCH_SESSIONS}")
        template = request.session_template if request.HasField("session_template") else None
        role = await self._creator_role(request.database, template)
        reply = pb.BatchCreateSessionsResponse.pb()()
        reply.session.extend(sessions.new_session(request.database, template, role) for _ in range(count))
        return reply

    async def _creator_role(self, database: str, template: Any | None) -> str | None:
        """A new session's creator_role, folded, once the database is found to have it
        (PERMISSION_DENIED "Role not found: r", Spanner's words, when it has not)."""
        if template is None or not template.creator_role:
            return None
        role = fold(template.creator_role)
        sessions.check_database(database)
        await self._executor.roles.role(database, role)
        return role

    async def GetSession(self, request: Any, context: Any) -> Any:
        return sessions.existing_session(request.name)

    async def ListSessions(self, request: Any, context: Any) -> Any:
        sessions.check_database(request.database)
        return pb.ListSessionsResponse.pb()()

    async def DeleteSession(self, request: Any, context: Any) -> Any:
        sessions.database_of(request.name)
        return empty_pb2.Empty()

    # transactions
    async def BeginTransaction(self, request: Any, context: Any) -> Any:
        sessions.database_of(request.session)
        mode = request.options.WhichOneof("mode")
        if mode == "read_only":
            check_read_only(request.options.read_only)
            reply = TransactionPb(id=self._transactions.read_only_id())
            reply.read_timestamp.CopyFrom(now_pb())
            return reply
        if mode == "partitioned_dml":
            return TransactionPb(id=self._transactions.partitioned_id())
        if mode != "read_write":
            raise errors.InvalidArgument("BeginTransaction takes read_write, read_only or partitioned_dml options")
        return TransactionPb(id=self._transactions.begin(request.session).id)

    async def Rollback(self, request: Any, context: Any) -> Any:
        sessions.database_of(request.session)
        await self._transactions.rollback(request.transaction_id)
        return empty_pb2.Empty()

    async def Commit(self, request: Any, context: Any) -> Any:
        sessions.database_of(request.session)
        intent = request_intent(context)
        keyed = Request.of(intent or "", f"{SPANNER}/Commit", request.SerializeToString(deterministic=True))
        reply = CommitReply(len(request.mutations) if request.return_commit_stats else None)

        async def attempt() -> Answer[Any]:
            ns = await self._namespace(request.session)
            role = access.SESSION_ROLE.get()
            if role is not None:
                deletes = {fold(m.delete.table) for m in request.mutations if m.WhichOneof("operation") == "delete"}
                access.role_commit(role, request, {t for t in deletes if await self._executor.tables.is_table(ns, t)})
            given = [await self._mutation(m, i, ns) for i, m in enumerate(request.mutations)]
            mutations = [m for m in given if m is not None]
            try:
                kind = request.WhichOneof("transaction")
                if kind == "single_use_transaction":
                    if request.single_use_transaction.WhichOneof("mode") != "read_write":
                        raise errors.InvalidArgument("a single-use Commit needs read_write transaction options")
                    return await self._once.commit(keyed, mutations, reply)
                if kind == "transaction_id":
                    return await self._transactions.commit(request.session, request.transaction_id, mutations,
                                                           keyed, reply)
                raise errors.InvalidArgument("Commit needs a transaction_id or a single_use_transaction")
            except (errors.CommitOutcomeUnknown, errors.StoreUnavailable, errors.TransactionAborted):
                raise
            except errors.QueueError as exc:  # in the names its DDL declared, should it reach the client
                for queue in {m.queue.name: m.queue for m in mutations if not isinstance(m, TableOp)}.values():
                    await self._executor.names.shown_in(exc, queue)
                raise

        try:
            answer = await self._once.run(keyed, reply, attempt)
        except errors.CommitOutcomeUnknown as exc:
            if intent is not None:
                exc.metadata["replay"] = f"resend the same {REQUEST_ID_HEADER}; the commit ledger answers it"
            raise
        if answer.replayed:
            logger.info("Commit %s answered from the commit ledger (a replay)", keyed.request_id)
        return answer.reply

    async def _namespace(self, session: str) -> Scope:
        """The session's database's namespace; and the session's role, for what its call runs
        (access.SESSION_ROLE)."""
        database = sessions.database_of(session)
        role = sessions.role_of(session)
        if role is not None:
            access.SESSION_ROLE.set(await self._executor.roles.role(database, role))
        return await self._admin.scope(database)

    async def _mutation(self, mutation: Any, index: int, ns: Scope) -> Mutation | None:
        """The domain's mutation; None for one that changes nothing (a Delete of no keys)."""
        kind = mutation.WhichOneof("operation")
        queue = None
        try:
            if kind in WRITES or (kind == "delete"
                                  and await self._executor.tables.is_table(ns, fold(mutation.delete.table))):
                return await self._executor.tables.mutation(mutation, ns)  # a Spanner table's rows
            if kind == "send":
                send = mutation.send
                queue = await self._executor.queue(ns, fold(send.queue))
                if queue.has_generated_keys and len(send.key.values) == len(queue.key_columns):
                    raise await self._executor.generated_written(queue)
                key = self._key(queue, send.key, "key", queue.sent_key_columns)
                if not send.HasField("payload"):
                    raise errors.InvalidArgument("a Send needs a payload")
                payload = values.decode(send.payload, queue.payload_type, "payload")
                await self._executor.check_payload(queue, payload, ns, "the payload")
                deliver_time = None
                if send.HasField("deliver_time"):
                    deliver_time = codec.timestamp_to_datetime(send.deliver_time, "deliver_time")
                return SendOp(queue, [OutgoingMessage(key=key, payload=payload, deliver_time=deliver_time)])
            if kind == "ack":
                ack = mutation.ack
                queue = await self._executor.queue(ns, fold(ack.queue))
                return AckOp(queue, [AckItem(key=self._key(queue, ack.key, "key"))],
                             ignore_not_found=ack.ignore_not_found)
            if kind == "delete":
                # A Delete of a queue's rows is an ack that accepts a missing message, as
                # Spanner's Delete accepts a missing row.
                delete = mutation.delete
                queue = await self._executor.queue(ns, fold(delete.table))
                if delete.key_set.ranges or delete.key_set.all_:
                    raise errors.InvalidArgument("a Delete of a queue's messages takes keys (no ranges, no all): "
                                                 "messages are deleted by key")
                items = [AckItem(key=self._key(queue, k, f"key {i}")) for i, k in enumerate(delete.key_set.keys)]
                return AckOp(queue, items, ignore_not_found=True) if items else None
            raise errors.InvalidArgument(
                f"{kind or 'an empty'} mutation: Commit takes Send, Ack, Delete and the Write mutations (Insert, "
                "Update, InsertOrUpdate, Replace) of tables"
            )
        except errors.QueueError as exc:
            if queue is not None:
                await self._executor.names.shown_in(exc, queue)
            exc.metadata.setdefault("mutation_index", str(index))
            exc.args = (f"mutation {index}: {exc.message}",)
            raise

    @staticmethod
    def _key(queue: Any, key: Any, what: str, columns: Any = None) -> tuple[Any, ...]:
        """A message's key: the values of ``columns``, the queue's key columns unless given (a
        Send's are those but the generated ones, which the database computes)."""
        columns = queue.key_columns if columns is None else columns
        if len(key.values) != len(columns):
            names = [c.name for c in columns]
            sent = " (a Send gives all but the generated ones)" if len(columns) != len(queue.key_columns) else ""
            raise errors.InvalidArgument(f"{what}: queue {queue.name!r} has {len(names)} key column(s) {names}{sent}, "
                                         f"the key has {len(key.values)} value(s)")
        return tuple(values.decode(v, c.type, f"{what} column {c.name!r}")
                     for v, c in zip(key.values, columns))

    # statements
    async def ExecuteSql(self, request: Any, context: Any) -> Any:
        ns = await self._namespace(request.session)
        parsed = await self._executor.parse(request.sql, ns)
        selector = request.transaction if request.HasField("transaction") else None
        async with self._transactions.use(request.session, selector) as use:
            return await self._statement(request, parsed, use, ns)

    async def _statement(self, request: Any, parsed: Parsed, use: Use, ns: Scope) -> Any:
        """Runs one statement; in an existing read-write transaction a retried seqno is
        answered from what the first attempt did, never run twice."""
        txn = use.txn if use.began is None else None
        fingerprint = hashlib.sha256(request.SerializeToString(deterministic=True)).digest()
        if txn is not None and request.seqno in txn.statements:
            seen, outcome = txn.statements[request.seqno]
            if seen != fingerprint:
                raise errors.InvalidArgument(f"seqno {request.seqno} was already used for another statement")
            if isinstance(outcome, errors.QueueError):
                raise outcome
            return outcome
        try:
            reply = result_set_pb(await self._executor.run(parsed, request.params, use, ns, request.param_types),
                                  use.began)
        except errors.QueueError as exc:
            if txn is not None and not isinstance(exc, (errors.TransactionAborted, errors.StoreUnavailable)):
                txn.statements[request.seqno] = (fingerprint, exc)
            raise
        if txn is not None:
            txn.statements[request.seqno] = (fingerprint, reply)
        return reply

    async def ExecuteStreamingSql(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        ns = await self._namespace(request.session)
        parsed = await self._executor.parse(request.sql, ns)
        selector = request.transaction if request.HasField("transaction") else None
        if isinstance(parsed.statement, ast.Receive):
            async for part in self._receive(parsed.statement, request, selector, ns):
                yield part
            return
        async with self._transactions.use(request.session, selector) as use:
            reply = await self._statement(request, parsed, use, ns)
        yield streamed(reply)

    async def _receive(self, statement: ast.Receive, request: Any, selector: Any,
                       ns: Scope) -> AsyncIterator[Any]:
        """RECEIVE: a long-running stream. The first part names the columns; then one
        part per message, each with a resume token, so the client hands every row
        over as it arrives. A resumed stream simply receives on (rows already
        delivered are leased, not sent again)."""
        kind = selector.WhichOneof("selector") if selector is not None else None
        # Spanner serves RECEIVE in a single-use read-only transaction only: a multi-use
        # snapshot (a transaction id, or one begun inline) or a read-write one is refused.
        if kind is not None and not (kind == "single_use" and selector.single_use.WhichOneof("mode") == "read_only"):
            what = {"id": "a transaction begun before", "begin": "a transaction begun by this query"}.get(kind, kind)
            raise errors.InvalidArgument(
                f"RECEIVE runs in a single-use read-only (strong) transaction, as Spanner requires, not in {what} "
                "(a multi-use snapshot or a read-write transaction): database.snapshot().execute_sql(...)"
            )
        if kind == "single_use":
            check_read_only(selector.single_use.read_only, receive=True)
        stream = await self._executor.receive(statement, request.params, ns)
        first = PartialResultSetPb(resume_token=b"receive:0")
        first.metadata.row_type.CopyFrom(values.row_type(stream.columns))
        yield first
        sent = 0
        async for rows in stream.batches():
            for row in rows:
                sent += 1
                yield PartialResultSetPb(values=row, resume_token=f"receive:{sent}".encode())

    async def ExecuteBatchDml(self, request: Any, context: Any) -> Any:
        ns = await self._namespace(request.session)
        parsed = [await self._executor.parse(s.sql, ns, f"statement {i}: ") for i, s in enumerate(request.statements)]
        if not parsed:
            raise errors.InvalidArgument("ExecuteBatchDml needs at least one statement")
        reply = pb.ExecuteBatchDmlResponse.pb()()
        selector = request.transaction if request.HasField("transaction") else None
        async with self._transactions.use(request.session, selector) as use:
            for i, (one, given) in enumerate(zip(parsed, request.statements)):
                # (a table's DDL is let through to be refused by run, as every DDL through ExecuteSql is)
                if not isinstance(one.statement, (ast.QueueInsert, ast.QueueDelete, ast.TableDml, ast.TableDdl)):
                    raise errors.InvalidArgument(f"statement {i}: ExecuteBatchDml takes INSERT, UPDATE and DELETE only")
                try:
                    result = await self._executor.run(one, given.params, use, ns, given.param_types)
                except (errors.TransactionAborted, errors.StoreUnavailable):
                    raise
                except errors.QueueError as exc:
                    if i == 0:
                        raise
                    reply.status.CopyFrom(SPANNER_ERRORS.to_status(exc))
                    break
                reply.result_sets.append(result_set_pb(result, use.began if i == 0 else None))
        return reply

    # reads
    async def Read(self, request: Any, context: Any) -> Any:
        ns = await self._namespace(request.session)
        role = access.SESSION_ROLE.get()
        if role is not None:
            access.role_read(role, request, await self._executor.tables.is_table(ns, fold(request.table)))
        selector = request.transaction if request.HasField("transaction") else None
        async with self._transactions.use(request.session, selector) as use:
            return result_set_pb(await self._executor.read(request, use, ns), use.began)

    async def StreamingRead(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        yield streamed(await self.Read(request, context))

    async def Unsupported(self, request: Any, context: Any) -> Any:
        raise errors.Unimplemented(
            "spanq serves Spanner's queue API and a subset for tables: sessions, ExecuteSql / ExecuteStreamingSql / "
            "ExecuteBatchDml, Read / StreamingRead, BeginTransaction, Commit and Rollback; partitioned queries and "
            "reads are not served; see docs/spanner-compat.md"
        )



def streamed(reply: Any) -> Any:
    """A whole ResultSet as the one PartialResultSet of a streaming call."""
    part = PartialResultSetPb(metadata=reply.metadata, resume_token=b"done")
    for row in reply.rows:
        part.values.extend(row.values)
    if reply.HasField("stats"):
        part.stats.CopyFrom(reply.stats)
    return part


def result_set_pb(result: Result | TableResult, began: bytes | None) -> Any:
    reply = ResultSetPb()
    if isinstance(result, TableResult):
        reply.metadata.row_type.CopyFrom(result.row_type)
        if result.lower_bound:
            reply.stats.row_count_lower_bound = result.row_count or 0
            return reply
    else:
        reply.metadata.row_type.CopyFrom(values.row_type(result.columns))
    if began is not None:
        reply.metadata.transaction.id = began
    for row in result.rows:
        reply.rows.add().values.extend(row)
    if result.row_count is not None:
        reply.stats.row_count_exact = result.row_count
    return reply


# -- admin -------------------------------------------------------------------------------


class InstanceAdminService:
    def __init__(self, admin: Admin, executor: Executor, catalog: Catalog) -> None:
        self._admin = admin
        self._executor = executor
        self._catalog = catalog

    async def ListInstanceConfigs(self, request: Any, context: Any) -> Any:
        return ia.ListInstanceConfigsResponse.pb()(instance_configs=self._admin.instance_configs(request.parent))

    async def GetInstanceConfig(self, request: Any, context: Any) -> Any:
        return self._admin.instance_config(request.name)

    async def CreateInstance(self, request: Any, context: Any) -> Any:
        instance = await self._admin.create_instance(request.parent, request.instance_id, request.instance)
        metadata = ia.CreateInstanceMetadata.pb()(instance=instance)
        metadata.start_time.CopyFrom(now_pb())
        metadata.end_time.CopyFrom(metadata.start_time)
        return self._admin.operation(instance.name, metadata, response=instance)

    async def GetInstance(self, request: Any, context: Any) -> Any:
        return await self._admin.get_instance(request.name)

    async def ListInstances(self, request: Any, context: Any) -> Any:
        # The emulator answers every instance whatever the filter; so does spanq.
        return ia.ListInstancesResponse.pb()(instances=await self._admin.list_instances(request.parent))

    async def DeleteInstance(self, request: Any, context: Any) -> Any:
        """Drops each database's queues, then forgets the instance and its databases; a database
        whose queues cannot all go (another database's queue is interleaved in one) stays, and the
        call is FAILED_PRECONDITION."""
        databases = await self._admin.instance_databases(request.name)
        queues = [q for d in databases for q in await self._admin.database_queues(d)]
        await self._executor.tables.check_droppable(databases, queues)  # all or nothing
        await _drop_all(self._catalog, queues)
        for database in databases:
            await self._executor.tables.drop_all(database)
            self._executor.protos.forget(database)
        await self._admin.forget_instance(request.name)
        return empty_pb2.Empty()


class DatabaseAdminService:
    def __init__(self, admin: Admin, executor: Executor, catalog: Catalog) -> None:
        self._admin = admin
        self._executor = executor
        self._catalog = catalog

    async def CreateDatabase(self, request: Any, context: Any) -> Any:
        """Creates the database and runs its extra statements, all or nothing: when one fails,
        the queues the others made are dropped and the database is forgotten (the operation's
        error says which statement failed)."""
        pg = request.database_dialect == dba_common.DatabaseDialect.POSTGRESQL
        database_id = parser.parse_database_name(request.create_statement)
        scope = Scope("", pg)
        parsed = [self._executor.parse_ddl(s, scope, f"extra statement {i}: ")
                  for i, s in enumerate(request.extra_statements)]
        database = await self._admin.create_database(request.parent, database_id, pg)
        error = await self._apply_ddl(database.name, parsed, descriptors=request.proto_descriptors)
        if error is not None:
            await _drop_all(self._catalog, await self._admin.database_queues(database.name))
            await self._executor.tables.drop_all(database.name)
            await self._admin.forget_database(database.name)  # and its proto bundle, by cascade
            self._executor.protos.forget(database.name)
        metadata = dba.CreateDatabaseMetadata.pb()(database=database.name)
        return self._admin.operation(database.name, metadata, response=database, error=error)

    async def UpdateDatabaseDdl(self, request: Any, context: Any) -> Any:
        """DDL of a database; of a name no CreateDatabase made, the default namespace's (spanq.v1's),
        as its sessions reach it."""
        sessions.check_database(request.database)
        scope = await self._admin.scope(request.database)
        parsed = [self._executor.parse_ddl(s, scope, f"statement {i}: ") for i, s in enumerate(request.statements)]
        metadata = dba.UpdateDatabaseDdlMetadata.pb()(database=request.database, statements=request.statements)
        error = await self._apply_ddl(request.database, parsed, metadata, request.proto_descriptors)
        op = self._admin.operation(request.database, metadata, response=empty_pb2.Empty(), error=error)
        return op

    async def _apply_ddl(self, database: str, parsed: list[Any], metadata: Any = None,
                         descriptors: bytes = b"") -> errors.QueueError | None:
        """Runs the statements in order; the first failure stops them (earlier ones stay), as in Spanner.
        ``descriptors`` are the request's proto descriptors, for its PROTO BUNDLE statements."""
        ns = await self._admin.scope(database)
        owner = database if ns.prefix else None  # the default namespace's queues belong to no database
        for i, statement in enumerate(parsed):
            try:
                await self._executor.ddl(statement, owner, ns, descriptors)
            except errors.QueueError as exc:
                if len(parsed) > 1:
                    exc.args = (f"statement {i}: {exc.message}",)
                exc.metadata.setdefault("statement_index", str(i))
                return exc
            if metadata is not None:
                metadata.commit_timestamps.append(now_pb())
        return None

    async def GetDatabase(self, request: Any, context: Any) -> Any:
        return await self._admin.get_database(request.name)

    async def ListDatabases(self, request: Any, context: Any) -> Any:
        await self._admin.get_instance(request.parent)
        return dba.ListDatabasesResponse.pb()(databases=await self._admin.list_databases(request.parent))

    async def DropDatabase(self, request: Any, context: Any) -> Any:
        await self._admin.get_database(request.database)
        queues = await self._admin.database_queues(request.database)
        await self._executor.tables.check_droppable([request.database], queues)  # all or nothing
        await _drop_all(self._catalog, queues)
        await self._executor.tables.drop_all(request.database)
        await self._admin.forget_database(request.database)  # and its proto bundle, by cascade
        self._executor.protos.forget(request.database)
        return empty_pb2.Empty()

    async def GetDatabaseDdl(self, request: Any, context: Any) -> Any:
        """The database's queues (those its DDL created), as declared; NOT_FOUND for a database
        that does not exist, which is how the client's ``database.exists()`` asks."""
        await self._admin.get_database(request.database)
        found = []
        for name in await self._admin.database_queues(request.database):
            try:
                found.append(await self._catalog.get(name))
            except errors.QueueNotFound:
                pass  # dropped meanwhile
        names, ns = self._executor.names, await self._admin.scope(request.database)
        tables = await self._executor.tables.ddl_of(request.database, ns)  # before the queues interleaved in them
        declared = await self._executor.tables.declared_names(request.database)
        queues = {q.name.removeprefix(ns.prefix): (await names.of(q)).queue for q in found}

        async def shown(kind: str, name: str) -> str:
            if kind == "function":
                function, _, queue = name.partition("_")
                return f"{function.upper()}_{queues.get(queue, queue)}"
            return queues.get(name, name) if kind == "queue" else declared.get(ns.prefix + name, name)

        roles = await self._executor.roles.ddl_of(request.database, shown)  # after what they grant on
        bundle = await self._executor.protos.of(request.database)  # before the columns of its types
        return dba.GetDatabaseDdlResponse.pb()(
            statements=([bundle.ddl()] if bundle else []) + tables
            + [queue_ddl(q, await names.of(q), ns.prefix, declared) for q in found] + roles,
            proto_descriptors=bundle.descriptors if bundle else b"")

    # Backups, database operations and roles: spanq has none. The emulator answers these
    # lists empty, and Google's test fixtures call them in their teardown.
    async def ListBackups(self, request: Any, context: Any) -> Any:
        sessions.check(request.parent, sessions.INSTANCE, "instance")
        return dba_backup.ListBackupsResponse.pb()()

    async def ListBackupOperations(self, request: Any, context: Any) -> Any:
        sessions.check(request.parent, sessions.INSTANCE, "instance")
        return dba_backup.ListBackupOperationsResponse.pb()()

    async def ListDatabaseOperations(self, request: Any, context: Any) -> Any:
        sessions.check(request.parent, sessions.INSTANCE, "instance")
        return dba.ListDatabaseOperationsResponse.pb()()

    async def ListDatabaseRoles(self, request: Any, context: Any) -> Any:
        """Spanner's system roles and the database's own, named databases/D/databaseRoles/R."""
        await self._admin.get_database(request.parent)
        return dba.ListDatabaseRolesResponse.pb()(database_roles=[
            dba.DatabaseRole.pb()(name=f"{request.parent}/databaseRoles/{role}")
            for role in await self._executor.roles.listed(request.parent)])

    async def GetBackup(self, request: Any, context: Any) -> Any:
        raise NotFound(f"Backup not found: {request.name} (spanq has no backups)")

    async def DeleteBackup(self, request: Any, context: Any) -> Any:
        raise NotFound(f"Backup not found: {request.name} (spanq has no backups)")


async def _drop_all(catalog: Catalog, queues: list[str]) -> None:
    """Drops the queues, those that others depend on (as parent or dead-letter queue)
    after those others: a pass drops what it can, the next one the rest. A queue that
    one outside the list depends on stays, and its FailedPrecondition says so."""
    while queues:
        refused: list[str] = []
        error: errors.FailedPrecondition | None = None
        for queue in queues:
            try:
                await catalog.drop(queue)
            except errors.QueueNotFound:
                pass
            except errors.FailedPrecondition as exc:
                refused.append(queue)
                error = error or exc
        if error is not None and len(refused) == len(queues):
            raise error
        queues = refused


class OperationsService:
    def __init__(self, admin: Admin) -> None:
        self._admin = admin

    async def GetOperation(self, request: Any, context: Any) -> Any:
        return self._admin.get_operation(request.name)

    async def WaitOperation(self, request: Any, context: Any) -> Any:
        return self._admin.get_operation(request.name)

    async def ListOperations(self, request: Any, context: Any) -> Any:
        return operations_pb2.ListOperationsResponse(operations=self._admin.list_operations(request.name))

    async def DeleteOperation(self, request: Any, context: Any) -> Any:
        self._admin.get_operation(request.name)
        return empty_pb2.Empty()

    async def CancelOperation(self, request: Any, context: Any) -> Any:
        self._admin.get_operation(request.name)
        return empty_pb2.Empty()


# -- assembly ---------------------------------------------------------------------------


def _unary(method: Callable[..., Awaitable[Any]], request: Any, response: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        SPANNER_ERRORS.translate_errors(method), request_deserializer=request.FromString, response_serializer=response.SerializeToString)


def _stream(method: Callable[..., AsyncIterator[Any]], request: Any, response: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_stream_rpc_method_handler(
        SPANNER_ERRORS.translate_stream_errors(method), request_deserializer=request.FromString, response_serializer=response.SerializeToString)


class SpannerFrontEnd:
    """The four services, their shared state, and the transaction reaper."""

    def __init__(self, catalog: Catalog, mutator: Mutator, receiver: Receiver, exactly_once_: ExactlyOnce,
                 operator: Operator, records: Records, tables: TableStore, clock: Clock, *, max_open_transactions: int,
                 idle_timeout: timedelta, max_lifetime: timedelta) -> None:
        self.admin = Admin(records)
        self.transactions = Transactions(mutator, exactly_once_, max_open=max_open_transactions,
                                         idle_timeout=idle_timeout, max_lifetime=max_lifetime)
        self.executor = Executor(catalog, mutator, receiver, operator, records, tables, clock, exactly_once_,
                                 access.authorize)
        self.spanner = SpannerService(catalog, mutator, exactly_once_, self.executor, self.transactions, self.admin)
        self.instance_admin = InstanceAdminService(self.admin, self.executor, catalog)
        self.database_admin = DatabaseAdminService(self.admin, self.executor, catalog)
        self.operations = OperationsService(self.admin)

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        s, i, d, o = self.spanner, self.instance_admin, self.database_admin, self.operations
        Empty = empty_pb2.Empty
        spanner_methods = {
            "CreateSession": _unary(s.CreateSession, pb.CreateSessionRequest.pb(), pb.Session.pb()),
            "BatchCreateSessions": _unary(s.BatchCreateSessions, pb.BatchCreateSessionsRequest.pb(),
                                          pb.BatchCreateSessionsResponse.pb()),
            "GetSession": _unary(s.GetSession, pb.GetSessionRequest.pb(), pb.Session.pb()),
            "ListSessions": _unary(s.ListSessions, pb.ListSessionsRequest.pb(), pb.ListSessionsResponse.pb()),
            "DeleteSession": _unary(s.DeleteSession, pb.DeleteSessionRequest.pb(), Empty),
            "ExecuteSql": _unary(s.ExecuteSql, pb.ExecuteSqlRequest.pb(), ResultSetPb),
            "ExecuteStreamingSql": _stream(s.ExecuteStreamingSql, pb.ExecuteSqlRequest.pb(), PartialResultSetPb),
            "ExecuteBatchDml": _unary(s.ExecuteBatchDml, pb.ExecuteBatchDmlRequest.pb(),
                                      pb.ExecuteBatchDmlResponse.pb()),
            "Read": _unary(s.Read, pb.ReadRequest.pb(), ResultSetPb),
            "StreamingRead": _stream(s.StreamingRead, pb.ReadRequest.pb(), PartialResultSetPb),
            "BeginTransaction": _unary(s.BeginTransaction, pb.BeginTransactionRequest.pb(), TransactionPb),
            "Commit": _unary(s.Commit, pb.CommitRequest.pb(), CommitResponsePb),
            "Rollback": _unary(s.Rollback, pb.RollbackRequest.pb(), Empty),
            "PartitionQuery": _unary(s.Unsupported, pb.PartitionQueryRequest.pb(), pb.PartitionResponse.pb()),
            "PartitionRead": _unary(s.Unsupported, pb.PartitionReadRequest.pb(), pb.PartitionResponse.pb()),
        }
        Op = operations_pb2.Operation
        instance_methods = {
            "ListInstanceConfigs": _unary(i.ListInstanceConfigs, ia.ListInstanceConfigsRequest.pb(),
                                          ia.ListInstanceConfigsResponse.pb()),
            "GetInstanceConfig": _unary(i.GetInstanceConfig, ia.GetInstanceConfigRequest.pb(),
                                        ia.InstanceConfig.pb()),
            "CreateInstance": _unary(i.CreateInstance, ia.CreateInstanceRequest.pb(), Op),
            "GetInstance": _unary(i.GetInstance, ia.GetInstanceRequest.pb(), ia.Instance.pb()),
            "ListInstances": _unary(i.ListInstances, ia.ListInstancesRequest.pb(), ia.ListInstancesResponse.pb()),
            "DeleteInstance": _unary(i.DeleteInstance, ia.DeleteInstanceRequest.pb(), Empty),
        }
        database_methods = {
            "CreateDatabase": _unary(d.CreateDatabase, dba.CreateDatabaseRequest.pb(), Op),
            "GetDatabase": _unary(d.GetDatabase, dba.GetDatabaseRequest.pb(), dba.Database.pb()),
            "ListDatabases": _unary(d.ListDatabases, dba.ListDatabasesRequest.pb(), dba.ListDatabasesResponse.pb()),
            "UpdateDatabaseDdl": _unary(d.UpdateDatabaseDdl, dba.UpdateDatabaseDdlRequest.pb(), Op),
            "DropDatabase": _unary(d.DropDatabase, dba.DropDatabaseRequest.pb(), Empty),
            "GetDatabaseDdl": _unary(d.GetDatabaseDdl, dba.GetDatabaseDdlRequest.pb(),
                                     dba.GetDatabaseDdlResponse.pb()),
            "ListBackups": _unary(d.ListBackups, dba_backup.ListBackupsRequest.pb(),
                                  dba_backup.ListBackupsResponse.pb()),
            "ListBackupOperations": _unary(d.ListBackupOperations, dba_backup.ListBackupOperationsRequest.pb(),
                                           dba_backup.ListBackupOperationsResponse.pb()),
            "ListDatabaseOperations": _unary(d.ListDatabaseOperations, dba.ListDatabaseOperationsRequest.pb(),
                                             dba.ListDatabaseOperationsResponse.pb()),
            "ListDatabaseRoles": _unary(d.ListDatabaseRoles, dba.ListDatabaseRolesRequest.pb(),
                                        dba.ListDatabaseRolesResponse.pb()),
            "GetBackup": _unary(d.GetBackup, dba_backup.GetBackupRequest.pb(), dba_backup.Backup.pb()),
            "DeleteBackup": _unary(d.DeleteBackup, dba_backup.DeleteBackupRequest.pb(), Empty),
        }
        operation_methods = {
            "GetOperation": _unary(o.GetOperation, operations_pb2.GetOperationRequest, Op),
            "WaitOperation": _unary(o.WaitOperation, operations_pb2.WaitOperationRequest, Op),
            "ListOperations": _unary(o.ListOperations, operations_pb2.ListOperationsRequest,
                                     operations_pb2.ListOperationsResponse),
            "DeleteOperation": _unary(o.DeleteOperation, operations_pb2.DeleteOperationRequest, Empty),
            "CancelOperation": _unary(o.CancelOperation, operations_pb2.CancelOperationRequest, Empty),
        }
        return [
            grpc.method_handlers_generic_handler(SPANNER, spanner_methods),
            grpc.method_handlers_generic_handler(INSTANCE_ADMIN, instance_methods),
            grpc.method_handlers_generic_handler(DATABASE_ADMIN, database_methods),
            grpc.method_handlers_generic_handler(OPERATIONS, operation_methods),
        ]

    def add_to(self, server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers(tuple(self.handlers()))

    def start(self) -> None:
        self.transactions.start()

    async def stop(self) -> None:
        await self.transactions.stop()
