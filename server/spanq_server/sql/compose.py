"""Composition of spanq's SQL: the named statements of queries.sql with the
identifiers and fragments of one queue (always psycopg.sql objects built from
validated names, never user text)."""

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import sql
from psycopg.adapt import PyFormat

from ..ground.model import ColumnType, Key, KeyColumn, QueueDef
from . import QUERIES

SQL_TYPES = {
    ColumnType.BOOL: "boolean",
    ColumnType.INT64: "bigint",
    ColumnType.STRING: "text",
    ColumnType.BYTES: "bytea",
    ColumnType.TIMESTAMP: "timestamptz",
    ColumnType.JSON: "jsonb",
}
TOKEN_FORMS = {
    ColumnType.BOOL: "bool",
    ColumnType.INT64: "int",
    ColumnType.STRING: "string",
    ColumnType.BYTES: "bytes",
    ColumnType.TIMESTAMP: "timestamp",
}
"""Each key type's lease_token_key_<form> and lease_token_part_<form> in queries.sql."""


def query(name: str, **fragments: sql.Composable) -> sql.Composed:
    """A named statement, with its ``{fragments}`` filled in."""
    statement = sql.SQL(QUERIES[name])  # type: ignore[arg-type]  # loaded from our own file
    return statement.format(**fragments)


def identifiers(names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def _table_key_definition(column: KeyColumn) -> sql.Composed:
    """A key column of a queue's table: a generated one is GENERATED ALWAYS AS (...) STORED, its
    expression the front-end's translation kept in the catalog (queue_key_column_generated)."""
    if column.generated_sql is None:
        return query("queue_key_column", column=sql.Identifier(column.name), type=sql.SQL(SQL_TYPES[column.type]))
    expression = sql.SQL(column.generated_sql)  # type: ignore[arg-type]  # composed by spanner/query/postgres.py
    return query("queue_key_column_generated", column=sql.Identifier(column.name),
                 type=sql.SQL(SQL_TYPES[column.type]), expression=expression)


class QueueStatements:
    """The identifiers and fragments of one queue's statements (composed, never from user text)."""

    def __init__(self, queue: QueueDef) -> None:
        self.queue = queue
        self.table = sql.Identifier("public", queue.name)
        self.receive_function = sql.Identifier(f"receive_{queue.name}")
        self.renew_function = sql.Identifier(f"renewlease_{queue.name}")
        self.deliver_time_index = f"spanq_dt_{queue.name}"
        self.lease_token_index = f"spanq_lt_{queue.name}"
        self.priority_index = f"spanq_pr_{queue.name}"
        self.key_concurrency_index = f"spanq_kc_{queue.name}"
        self.key_slots_function = sql.Identifier(f"keyslots_{queue.name}")
        """A queue with max_in_flight_per_key: its leases left per key value (queue_key_slots_function_create)."""
        self.ordering_index = f"spanq_ok_{queue.name}"
        # The ordering key's trigger functions (queue_ordering_create): per queue, so that
        # their statements are planned once per session, not built per row.
        self.ordering_functions = {kind: sql.Identifier(f"keyed_{kind}_{queue.name}")
                                   for kind in ("send", "gone", "fixed")}
        self.archive = sql.Identifier("spanq", f"archive_{queue.name}")
        """Acked messages kept for the queue's archive_duration (queue_archive_create)."""
        self.keys = identifiers(c.name for c in queue.key_columns)
        self.key_definitions = sql.SQL(",\n    ").join(
            sql.SQL("{} {} NOT NULL").format(sql.Identifier(c.name), sql.SQL(SQL_TYPES[c.type]))
            for c in queue.key_columns
        )
        self.table_key_definitions = sql.SQL(",\n    ").join(_table_key_definition(c) for c in queue.key_columns)
        """The queue table's key columns: a generated one computed by PostgreSQL (the archive's are plain)."""
        sent = queue.sent_key_columns
        self.sent_keys = identifiers(c.name for c in sent)
        """The key columns a send writes (all but the generated ones)."""
        self.sent_key_arrays = sql.SQL(", ").join(
            sql.SQL("{}::{}[]").format(sql.Placeholder(f"k{i}", PyFormat.BINARY), sql.SQL(SQL_TYPES[c.type]))
            for i, c in enumerate(sent)
        )
        self.key_outputs = sql.SQL(",\n    ").join(
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(SQL_TYPES[c.type])) for c in queue.key_columns
        )
        # Arrays go in binary: psycopg dumps them 4-5x faster than as text.
        self.key_arrays = sql.SQL(", ").join(
            sql.SQL("{}::{}[]").format(sql.Placeholder(f"k{i}", PyFormat.BINARY), sql.SQL(SQL_TYPES[c.type]))
            for i, c in enumerate(queue.key_columns)
        )

    def token_key_field(self, alias: str) -> sql.Composed:
        """The key of ``alias``'s row as a lease token carries it (NULL when a value has no
        token form: the token then names its row by itself, through the token index)."""
        return sql.SQL(" || ',' || ").join(
            query(f"lease_token_key_{TOKEN_FORMS[c.type]}", value=sql.Identifier(alias, c.name))
            for c in self.queue.key_columns
        )

    def new_token(self, prefix: sql.Composable, end: sql.Composable, alias: str) -> sql.Composed:
        """A fresh lease token for ``alias``'s row (lease_token_new)."""
        return query("lease_token_new", prefix=prefix, end=end, key_field=self.token_key_field(alias))

    def token_keys(self, tokens: sql.Composable) -> sql.Composed:
        """The rows (key columns, spanq_token) naming the key each lease token of the text
        array ``tokens`` is for (lease_token_keys): a subquery to join the queue with by key
        AND token."""
        field = query("lease_token_key_field", token=sql.SQL("t.spanq_token"))
        decoded = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(
                query(f"lease_token_part_{TOKEN_FORMS[c.type]}",
                      part=sql.SQL("split_part({}, ',', {})").format(field, sql.Literal(i + 1))),
                sql.Identifier(c.name))
            for i, c in enumerate(self.queue.key_columns)
        )
        return query("lease_token_keys", tokens=tokens, decoded_key_columns=decoded,
                     o_key_columns=self.qualified_keys("o"), queue=self.table,
                     unkeyed=query("lease_token_unkeyed", token=sql.SQL("o.spanq_lease_token")),
                     token_unkeyed=query("lease_token_unkeyed", token=sql.SQL("t.spanq_token")))

    def by_token(self, name: str, **fragments: sql.Composable) -> sql.Composed:
        """A named statement that finds rows by the lease tokens of ``%(lease_tokens)s``
        (lease_token_keys), with the fragments every such statement takes."""
        return query(name, queue=self.table, token_keys=self.token_keys(sql.SQL("%(lease_tokens)s::text[]")),
                     m_key_columns=self.qualified_keys("m"), n_key_columns=self.qualified_keys("n"),
                     f_key_columns=self.qualified_keys("f"), held_key_columns=self.qualified_keys("held"),
                     unkeyed=query("lease_token_unkeyed", token=sql.SQL("m.spanq_lease_token")), **fragments)

    def qualified_keys(self, alias: str, sent: bool = False) -> sql.Composed:
        """``alias``'s key columns (``sent``: those a send writes, not the generated ones)."""
        columns = self.queue.sent_key_columns if sent else self.queue.key_columns
        return sql.SQL(", ").join(sql.Identifier(alias, c.name) for c in columns)

    def key_array_params(self, keys: Sequence[Key]) -> dict[str, Any]:
        return {f"k{i}": [key[i] for key in keys] for i in range(len(self.queue.key_columns))}

    def receive_function_ddl(self) -> sql.Composed:
        q = self.queue
        steps: sql.Composable = sql.SQL("")
        live: sql.Composable = sql.SQL("")
        if q.dead_letter_queue and q.max_delivery_attempts:
            steps = query(
                "queue_receive_dead_letter_steps",
                queue=self.table,
                m_key_columns=self.qualified_keys("m"),
                ready_qualified_key_columns=self.qualified_keys("ready"),
                max_delivery_attempts=sql.Literal(q.max_delivery_attempts),
                dead_letter_queue=sql.Identifier("public", q.dead_letter_queue),
                d_key_columns=self.qualified_keys("d"),
                key_columns=self.keys,
                # The dead-letter queue's key columns are the queue's (queues.check_dead_letter_queue): its
                # generated ones it computes again.
                m_sent_key_columns=self.qualified_keys("m", sent=True),
                sent_key_columns=self.sent_keys,
                queue_name=sql.Literal(q.name),
                max_backoff=sql.Literal(q.max_backoff),
                # Read as it moves, so that the dead-letter queue's setting changes apply at once.
                dead_letter_ordered=sql.SQL(
                    "(SELECT q.enable_message_ordering FROM spanq.queues AS q WHERE q.name = {})"
                ).format(sql.Literal(q.dead_letter_queue)),
            )
            live = sql.SQL(" AND ready.spanq_attempt <= {}").format(sql.Literal(q.max_delivery_attempts))
        key_admits, limit_steps, admitted = self.receive_limits(live)
        return query(
            "queue_receive_function_create",
            receive_function=self.receive_function,
            lease_duration=sql.Literal(q.lease_duration),
            key_column_outputs=self.key_outputs,
            payload_type=sql.SQL(SQL_TYPES[q.payload_type]),
            ready_key_columns=self.qualified_keys("m"),
            queue=self.table,
            dead_letter_steps=steps,
            delivery_paused=sql.SQL(" AND false" if q.disable_delivery else ""),
            key_admits=key_admits,
            limit_steps=limit_steps,
            admitted=admitted,
            max_backoff=sql.Literal(q.max_backoff),
            initial_backoff=sql.Literal(q.initial_backoff),
            m_key_columns=self.qualified_keys("m"),
            ready_qualified_key_columns=self.qualified_keys("ready"),
            leased_key_columns=self.qualified_keys("leased"),
            live_condition=live,
            new_token=self.new_token(sql.SQL("$3"), sql.SQL("(extract(epoch FROM clock.now + $2) * 1000000)::bigint"),
                                     "m"),
        )

    def receive_limits(self, live: sql.Composable) -> tuple[sql.Composable, sql.Composable, sql.Composable]:
        """A receive function's ``{key_admits}``, ``{limit_steps}`` and ``{admitted}``: for an
        unlimited queue nothing, and its function leases ``ready`` as it is."""
        q = self.queue
        if q.max_in_flight_per_key is None and q.rate_limit is None:
            return sql.SQL(""), sql.SQL(""), sql.SQL("ready")
        empty: sql.Composable = sql.SQL("")
        key_admits = key_rank = key_admitted = rate_gate = rate_cap = rate_spend = empty
        name = sql.Literal(q.name)
        if q.max_in_flight_per_key is not None:
            keyed = dict(key_slots_function=self.key_slots_function,
                         concurrency_key=sql.Identifier(self.concurrency_column().name))
            # Each spliced after other text (queries.sql's blocks lose their leading blanks).
            key_admits = sql.SQL(" {}").format(query("queue_receive_key_admits", **keyed))
            key_rank = sql.SQL(", {}").format(query("queue_receive_key_rank", **keyed))
            key_admitted = sql.SQL(" {}").format(query("queue_receive_key_admitted"))
        if q.rate_limit is not None:
            rate_gate = sql.SQL(", {}").format(query("queue_receive_rate_gate", rate_limit=sql.Literal(q.rate_limit),
                                                     rate_limit_burst=sql.Literal(q.burst()), queue_name=name))
            rate_cap = sql.SQL("\n    {}").format(query("queue_receive_rate_cap"))
            rate_spend = sql.SQL(", {}").format(query("queue_receive_rate_spend", key_admitted=key_admitted,
                                                      queue_name=name))
        steps = query("queue_receive_limit_steps", rate_gate=rate_gate, key_rank=key_rank, key_admitted=key_admitted,
                      rate_cap=rate_cap, rate_spend=rate_spend, queue=self.table,
                      m_key_columns=self.qualified_keys("m"),
                      ready_qualified_key_columns=self.qualified_keys("ready"), live_condition=live,
                      ranked_key_columns=self.qualified_keys("ranked"))
        return key_admits, steps, sql.SQL("admitted AS ready")

    def concurrency_column(self) -> KeyColumn:
        """The key column whose values max_in_flight_per_key counts by."""
        return next(c for c in self.queue.key_columns if c.name == self.queue.concurrency_key)

    def key_slots_ddl(self) -> list[sql.Composed]:
        """What a queue with max_in_flight_per_key needs before its receive function: the
        index its key slots are counted by and the function that counts them."""
        column = self.concurrency_column()
        value = sql.SQL("spanq_value")
        return [
            query("queue_key_slots_index", key_concurrency_index=sql.Identifier(self.key_concurrency_index),
                  queue=self.table, concurrency_key=sql.Identifier(column.name)),
            query("queue_key_slots_function_create", key_slots_function=self.key_slots_function,
                  queue_name=sql.Literal(self.queue.name),
                  value_form=query(f"lease_token_key_{TOKEN_FORMS[column.type]}", value=value),
                  max_in_flight_per_key=sql.Literal(self.queue.max_in_flight_per_key), queue=self.table,
                  concurrency_key=sql.Identifier(column.name)),
        ]

    def key_slots_index_drop(self) -> sql.Composed:
        return query("queue_key_slots_index_drop",
                     key_concurrency_index=sql.Identifier("public", self.key_concurrency_index))

    def archive_ddl(self) -> sql.Composed:
        return query("queue_archive_create", archive=self.archive, key_column_definitions=self.key_definitions,
                     payload_type=sql.SQL(SQL_TYPES[self.queue.payload_type]),
                     archive_index=sql.Identifier(f"spanq_at_{self.queue.name}"))

    def archive_step(self, acked_key_columns: sql.Composable, request_id: sql.Composable) -> sql.Composable:
        """What an ack statement's ``{archive}`` is: nothing when the queue keeps no archive,
        else a step that inserts what its ``acked`` step deleted (with ``{archive_returning}``)."""
        if self.queue.archive_duration is None:
            return sql.SQL("")
        return query("message_ack_archive", archive=self.archive, key_columns=self.keys,
                     acked_key_columns=acked_key_columns, request_id=request_id)

    def archive_returning(self) -> sql.Composable:
        return sql.SQL("") if self.queue.archive_duration is None else query("message_ack_archive_returning")

    def history_columns_ddl(self) -> sql.Composed:
        """The columns, indexes and triggers beside queue_table_create's (each queue's, and
        what migrations add to existing queues), ordering keys' last."""
        columns = query("queue_history_columns_add", queue=self.table,
                        priority_index=sql.Identifier(self.priority_index))
        return sql.SQL(";\n").join([columns, self.ordering_ddl()])

    def ordering_ddl(self) -> sql.Composed:
        """The queue's ordering triggers, functions and index when it has
        enable_message_ordering (queue_ordering_create), else their removal and the trigger
        that refuses a keyed message (queue_ordering_drop)."""
        return query("queue_ordering_create" if self.queue.enable_message_ordering else "queue_ordering_drop",
                     queue=self.table, queue_name=sql.Literal(self.queue.name),
                     ordering_index=sql.Identifier(self.ordering_index),
                     m_key_columns=self.qualified_keys("m"), n_key_columns=self.qualified_keys("n"),
                     **self.ordering_function_fragments())

    def ordering_function_fragments(self) -> dict[str, sql.Composable]:
        return {f"{kind}_function": name for kind, name in self.ordering_functions.items()}

    def renew_function_ddl(self) -> sql.Composed:
        q = self.queue
        return query(
            "queue_renew_function_create",
            renew_function=self.renew_function,
            lease_duration=sql.Literal(q.lease_duration),
            ready_key_columns=self.qualified_keys("m"),
            queue=self.table,
            max_backoff=sql.Literal(q.max_backoff),
            initial_backoff=sql.Literal(q.initial_backoff),
            m_key_columns=self.qualified_keys("m"),
            held_key_columns=self.qualified_keys("held"),
            f_key_columns=self.qualified_keys("f"),
            token_keys=self.token_keys(sql.SQL("$1")),
            new_token=self.new_token(
                query("lease_token_prefix", token=sql.SQL("held.spanq_old_token"),
                      keyed=sql.SQL("NOT {}").format(query("lease_token_unkeyed", token=sql.SQL("held.spanq_old_token")))),
                sql.SQL("(extract(epoch FROM clock.now + $2) * 1000000)::bigint"), "m"),
        )

    def token_index_ddl(self) -> sql.Composed:
        """The queue's token index, of the tokens that do not carry their key (lease_token_index)."""
        return query("lease_token_index", lease_token_index=sql.Identifier(self.lease_token_index), queue=self.table,
                     unkeyed=query("lease_token_unkeyed", token=sql.SQL("spanq_lease_token")))

