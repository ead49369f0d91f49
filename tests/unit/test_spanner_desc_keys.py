"""DESC primary-key columns of the Spanner front-end, without PostgreSQL: the parser keeps each
key column's direction (tables and queues, GoogleSQL), GetDatabaseDdl's text lists it and reads
back, the PostgreSQL DDL of a mixed-direction key has an index in its order, and a KeyRange is a
condition in the key's order (keys.proto: on a DESC column the start is the greater value)."""

import pytest

from spanq_server.ground.errors import InvalidArgument
from spanq_server.spanner.query import ast, parser
from spanq_server.spanner.query import postgres as t
from spanq_server.spanner.query.dialects import Dialect
from spanq_server.spanner.query.executor import queue_ddl, queue_from_ddl
from spanq_server.spanner.query.names import Spelling
from spanq_server.spanner.query.schema import TableDef, table_ddl, table_of

MESSAGES = ("CREATE TABLE Messages (UserId INT64 NOT NULL, MessageId INT64 NOT NULL, Body STRING(MAX)) "
            "PRIMARY KEY (UserId, MessageId DESC)")
TASKS = ("CREATE QUEUE Tasks (UserId INT64 NOT NULL, MessageId STRING(36) NOT NULL, Payload BYTES(MAX) NOT NULL) "
         "PRIMARY KEY (UserId ASC, MessageId DESC)")


def table(text: str, name: str = "d1_t") -> TableDef:
    statement = parser.parse_table(text)
    assert isinstance(statement, ast.CreateTable)
    return table_of(statement, name, None)


def test_create_table_keeps_each_key_columns_direction_and_lists_it_as_declared() -> None:
    statement = parser.parse_table(MESSAGES)
    assert isinstance(statement, ast.CreateTable)
    assert statement.primary_key == ("userid", "messageid") and statement.descending == ("messageid",)
    messages = table_of(statement, "d1_messages", None)
    assert [(c.name, d) for c, d in messages.key_order] == [("userid", False), ("messageid", True)]
    assert TableDef.of_json("d1_messages", messages.as_json()) == messages  # as spanq.spanner_tables keeps it
    text = table_ddl(messages, "d1_")
    assert text.endswith(") PRIMARY KEY(UserId, MessageId DESC)")
    again = parser.parse_table(text.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    assert isinstance(again, ast.CreateTable) and again.if_not_exists and again.descending == ("messageid",)
    # A definition stored before DESC keys has no "descending": all ascending.
    old = {k: v for k, v in messages.as_json().items() if k != "descending"}
    assert [d for _, d in TableDef.of_json("d1_messages", old).key_order] == [False, False]
    assert "descending" not in table("CREATE TABLE T (A INT64 NOT NULL) PRIMARY KEY (A ASC)").as_json()


def test_create_queue_keeps_desc_keys_and_get_database_ddl_lists_them_back() -> None:
    statement = parser.parse_queue(TASKS)
    assert isinstance(statement, ast.CreateQueue)
    assert statement.primary_key == ("userid", "messageid") and statement.descending == ("messageid",)
    spelling = Spelling.of_ddl(statement)
    assert spelling.descending("messageid") and not spelling.descending("userid")
    assert spelling.ddl["descending"] == ["messageid"]
    text = queue_ddl(queue_from_ddl(statement), spelling)
    assert ") PRIMARY KEY (UserId, MessageId DESC)" in text
    again = parser.parse_queue(text.replace("CREATE QUEUE", "CREATE QUEUE IF NOT EXISTS"))
    assert isinstance(again, ast.CreateQueue) and again.descending == ("messageid",)
    assert queue_from_ddl(again) == queue_from_ddl(statement)
    ascending = parser.parse_queue(TASKS.replace(" DESC", ""))
    assert isinstance(ascending, ast.CreateQueue) and "descending" not in Spelling.of_ddl(ascending).ddl


def test_postgresql_dialect_keys_stay_ascending() -> None:
    with pytest.raises(InvalidArgument, match="DESC keys are not supported in PostgreSQL-dialect databases"):
        parser.parse_queue("CREATE QUEUE q (id bigint NOT NULL, payload bytea NOT NULL, PRIMARY KEY (id DESC))",
                           Dialect.POSTGRESQL)
    with pytest.raises(InvalidArgument):
        parser.parse_table("CREATE TABLE t (id bigint NOT NULL, PRIMARY KEY (id DESC))", Dialect.POSTGRESQL)


def test_a_mixed_direction_key_gets_a_unique_index_in_its_order_beside_the_primary_key() -> None:
    mixed = [s.as_string(None) for s in t.create_table(table(MESSAGES, "d1_messages"), None)]
    assert 'PRIMARY KEY ("userid", "messageid")' in mixed[0]  # what foreign keys and ON CONFLICT name
    assert mixed[1] == 'CREATE UNIQUE INDEX "d1_messages$key" ON "public"."d1_messages" ("userid", "messageid" DESC)'
    # One direction throughout: the primary key's own index serves (read backwards when DESC).
    assert len(t.create_table(table("CREATE TABLE T (A INT64 NOT NULL, B INT64 NOT NULL) PRIMARY KEY (A DESC, B DESC)"),
                              None)) == 1
    assert len(t.create_table(table("CREATE TABLE T (A INT64 NOT NULL) PRIMARY KEY (A)"), None)) == 1


def test_a_range_on_a_desc_column_runs_from_the_greater_value_to_the_smaller() -> None:
    key = table("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K DESC)").key
    params: dict = {}  # type: ignore[type-arg]
    condition = t.key_condition(key, [], [t.KeyRange((100,), True, (1,), True)], params, descending=[True])
    assert condition.as_string(None) == '((ROW("k") <= ROW(%(k0)s::bigint) AND ROW("k") >= ROW(%(k1)s::bigint)))'
    assert params == {"k0": 100, "k1": 1}


def test_a_mixed_key_compares_each_run_of_one_direction_as_one_row() -> None:
    messages = table(MESSAGES)
    params: dict = {}  # type: ignore[type-arg]
    condition = t.key_condition(messages.key, [], [t.KeyRange((1, 5), False, (2,), False)], params,
                                descending=[d for _, d in messages.key_order])
    after = ('(ROW("userid") >= ROW(%(k0)s::bigint) AND (ROW("userid") > ROW(%(k0)s::bigint) OR '
             '(ROW("userid") = ROW(%(k0)s::bigint) AND ROW("messageid") < ROW(%(k1)s::bigint))))')
    assert condition.as_string(None) == f'(({after} AND ROW("userid") < ROW(%(k2)s::bigint)))'
    assert params == {"k0": 1, "k1": 5, "k2": 2}
    # An ascending key's condition is as it was: one row comparison per bound.
    plain = t.key_condition(messages.key, [], [t.KeyRange((1, 5), True, (), False)], {})
    assert plain.as_string(None) == '((ROW("userid", "messageid") >= ROW(%(k0)s::bigint, %(k1)s::bigint)))'
