"""What differs between the dialects and between the two surfaces of the one grammar
(``parser``): the words each reads, the column types of a queue in each dialect, and
what each says it understands when it stops. The grammar's rules are the parser's;
these are its tables.

The queue surface is the statements of Spanner's queues (CREATE QUEUE, RECEIVE_,
RENEWLEASE_, and SELECT, INSERT and DELETE of one queue's messages), in GoogleSQL and
PostgreSQL; the table subset is the GoogleSQL that spanq serves on Spanner tables (and
on queues joined or counted as tables).
"""

import enum
from datetime import timedelta

from ...ground.model import ColumnType


class Dialect(enum.Enum):
    """A database's dialect (its DatabaseDialect): how its statements are read."""

    GOOGLESQL = "GOOGLE_STANDARD_SQL"
    POSTGRESQL = "POSTGRESQL"

    @classmethod
    def of(cls, pg: bool) -> "Dialect":
        return cls.POSTGRESQL if pg else cls.GOOGLESQL


class Surface(enum.Enum):
    """Which statements of the grammar a text is read as."""

    QUEUE = "queue"
    TABLE = "table"


# -- the queue surface ----------------------------------------------------------------

QUEUE_SUPPORTED = (
    "CREATE QUEUE, DROP QUEUE, SELECT * | <columns> FROM RECEIVE_<queue>(...) [AS r] [WHERE ...], "
    "SELECT * | <columns> FROM RENEWLEASE_<queue>(...) [AS r], "
    "DELETE FROM <queue> WHERE ... [ASSERT_ROWS_MODIFIED 1], INSERT INTO <queue> (...) VALUES (...) [THEN RETURN ...], "
    "SELECT ... FROM <queue> [WHERE ...] [ORDER BY ...] [LIMIT n]"
)

RECEIVE_ARGS = ("max_duration", "max_batch_size", "priority")
PG_RECEIVE_ARGS = ("max_batch_size", "priority", "max_duration")
"""spanner.receive_<queue>'s arguments in order (Spanner's PostgreSQL dialect)."""
PRIORITIES = ("low", "medium", "high")
"""Spanner's RECEIVE priority values (accepted; see docs/spanner-compat.md)."""

QUEUE_TYPES = {"int64": ColumnType.INT64, "string": ColumnType.STRING, "bytes": ColumnType.BYTES,
               "timestamp": ColumnType.TIMESTAMP, "bool": ColumnType.BOOL, "json": ColumnType.JSON}
"""A queue's column types in GoogleSQL."""
PG_QUEUE_TYPES = {"bigint": ColumnType.INT64, "int8": ColumnType.INT64, "varchar": ColumnType.STRING,
                  "text": ColumnType.STRING, "bytea": ColumnType.BYTES, "timestamptz": ColumnType.TIMESTAMP,
                  "boolean": ColumnType.BOOL, "bool": ColumnType.BOOL, "jsonb": ColumnType.JSON}
"""A queue's column types in Spanner's PostgreSQL dialect."""

PG_TABLE_TYPES = {"bigint": "INT64", "int8": "INT64", "boolean": "BOOL", "bool": "BOOL", "bytea": "BYTES",
                  "varchar": "STRING", "text": "STRING", "date": "DATE", "float8": "FLOAT64", "numeric": "NUMERIC",
                  "timestamptz": "TIMESTAMP", "jsonb": "JSON"}
"""A table's column types in Spanner's PostgreSQL dialect, as Spanner's types (``double precision``,
``character varying`` and ``timestamp with time zone`` are read as float8, varchar, timestamptz)."""

MAX_INTERVAL = timedelta(days=3_652_059)
"""The widest INTERVAL: Spanner's whole TIMESTAMP range, 0001-01-01 to 9999-12-31."""


# -- the table subset -----------------------------------------------------------------

TABLE_SUPPORTED = (
    "CREATE TABLE, DROP TABLE, ALTER TABLE ADD / DROP COLUMN, CREATE [UNIQUE] INDEX, DROP INDEX; INSERT / UPDATE / "
    "DELETE of a table with a WHERE of comparisons, IN, LIKE, IS [NOT] NULL, IN (SELECT ...), EXISTS, AND / OR / NOT, "
    "and THEN RETURN; SELECT over tables and queues with joins, WHERE, GROUP BY, HAVING, COUNT / SUM / AVG / MIN / "
    "MAX, UNION ALL, ORDER BY and LIMIT (see docs/spanner-compat.md)"
)

RESERVED = frozenset({
    "all", "and", "as", "asc", "between", "by", "cross", "desc", "distinct", "except", "exists", "from", "full",
    "group", "having", "in", "inner", "intersect", "is", "join", "left", "like", "limit", "not", "null", "offset",
    "on", "or", "order", "outer", "right", "select", "set", "then", "union", "using", "where", "values", "true",
    "false", "return",
})
"""Words the table subset never reads as a name unless `quoted` (the queue surface reads any word as one)."""


# -- what each surface understands ---------------------------------------------


def supported(surface: Surface) -> str:
    """What a surface understands: the end of its parse errors."""
    if surface is Surface.QUEUE:
        return f"spanq's Spanner front-end understands only: {QUEUE_SUPPORTED}"
    return f"spanq's Spanner front-end understands, on tables: {TABLE_SUPPORTED}"

