"""Composition of spanq's SQL: the named statements of queries.sql with the
identifiers and fragments of one queue (always psycopg.sql objects built from
validated names, never user text)."""

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import sql
from psycopg.adapt import PyFormat

from ..model import ColumnType, Key, QueueDef
from . import QUERIES

SQL_TYPES = {
    ColumnType.BOOL: "boolean",
    ColumnType.INT64: "bigint",
    ColumnType.STRING: "text",
    ColumnType.BYTES: "bytea",
    ColumnType.TIMESTAMP: "timestamptz",
    ColumnType.JSON: "jsonb",
}


def query(name: str, **fragments: sql.Composable) -> sql.Composed:
    """A named statement, with its ``{fragments}`` filled in."""
    statement = sql.SQL(QUERIES[name])  # type: ignore[arg-type]  # loaded from our own file
    return statement.format(**fragments)


def identifiers(names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


class QueueStatements:
    """The identifiers and fragments of one queue's statements (composed, never from user text)."""

    def __init__(self, queue: QueueDef) -> None:
        self.queue = queue
        self.table = sql.Identifier("public", queue.name)
        self.receive_function = sql.Identifier(f"receive_{queue.name}")
        self.renew_function = sql.Identifier(f"renewlease_{queue.name}")
        self.deliver_time_index = f"spanq_dt_{queue.name}"
        self.lease_token_index = f"spanq_lt_{queue.name}"
        self.keys = identifiers(c.name for c in queue.key_columns)
        self.key_definitions = sql.SQL(",\n    ").join(
            sql.SQL("{} {} NOT NULL").format(sql.Identifier(c.name), sql.SQL(SQL_TYPES[c.type]))
            for c in queue.key_columns
        )
        self.key_outputs = sql.SQL(",\n    ").join(
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(SQL_TYPES[c.type])) for c in queue.key_columns
        )
        # Arrays go in binary: psycopg dumps them 4-5x faster than as text.
        self.key_arrays = sql.SQL(", ").join(
            sql.SQL("{}::{}[]").format(sql.Placeholder(f"k{i}", PyFormat.BINARY), sql.SQL(SQL_TYPES[c.type]))
            for i, c in enumerate(queue.key_columns)
        )

    def qualified_keys(self, alias: str) -> sql.Composed:
        return sql.SQL(", ").join(sql.Identifier(alias, c.name) for c in self.queue.key_columns)

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
                queue_name=sql.Literal(q.name),
                max_backoff=sql.Literal(q.max_backoff),
            )
            live = sql.SQL(" AND ready.spanq_attempt <= {}").format(sql.Literal(q.max_delivery_attempts))
        return query(
            "queue_receive_function_create",
            receive_function=self.receive_function,
            lease_duration=sql.Literal(q.lease_duration),
            key_column_outputs=self.key_outputs,
            payload_type=sql.SQL(SQL_TYPES[q.payload_type]),
            ready_key_columns=self.qualified_keys("m"),
            queue=self.table,
            dead_letter_steps=steps,
            max_backoff=sql.Literal(q.max_backoff),
            initial_backoff=sql.Literal(q.initial_backoff),
            m_key_columns=self.qualified_keys("m"),
            ready_qualified_key_columns=self.qualified_keys("ready"),
            live_condition=live,
        )

    def history_columns_ddl(self) -> sql.Composed:
        return query("queue_history_columns_add", queue=self.table)

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
        )

