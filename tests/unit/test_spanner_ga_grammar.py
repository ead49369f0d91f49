"""The GA queue DDL and the access-control statements as the one grammar reads them (issue 25),
in both dialects: what each statement becomes, and what is refused with why."""

import pytest

from spanq_server.ground.errors import InvalidArgument
from spanq_server.ground.model import ColumnType
from spanq_server.spanner.query import ast
from spanq_server.spanner.query.parser import Dialect, parse_ddl

G, PG = Dialect.GOOGLESQL, Dialect.POSTGRESQL


@pytest.mark.parametrize(("text", "dialect", "expected"), [
    ("CREATE ROLE Producer", G, ast.CreateRole("producer", "Producer")),
    ("DROP ROLE producer;", PG, ast.DropRole("producer")),
    ("GRANT INSERT, SELECT ON QUEUE Orders, Jobs TO ROLE a, b", G,
     ast.Grant(("insert", "select"), "queue", ("orders", "jobs"), ("a", "b"))),
    ("GRANT EXECUTE ON TABLE FUNCTION RECEIVE_Orders TO ROLE c", G,
     ast.Grant(("execute",), "function", ("receive_orders",), ("c",))),
    ("REVOKE DELETE ON TABLE Users FROM ROLE c", G, ast.Grant(("delete",), "table", ("users",), ("c",), revoke=True)),
    ("GRANT INSERT ON QUEUE orders TO producer", PG, ast.Grant(("insert",), "queue", ("orders",), ("producer",))),
    ("GRANT EXECUTE ON FUNCTION spanner.renew_lease_orders TO c", PG,
     ast.Grant(("execute",), "function", ("renewlease_orders",), ("c",))),
    ("ALTER QUEUE Q SET OPTIONS (disable_send = NULL, disable_delivery = true)", G,
     ast.AlterQueue("q", options=ast.QueueOptions(disable_delivery=True, reset=frozenset({"disable_send"})))),
    ("ALTER QUEUE Q REPLACE ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 3 DAY))", G,
     ast.AlterQueue("q", row_deletion="replace", policy=ast.RowDeletionPolicy("delivertime", 3))),
    ("ALTER QUEUE q DROP ROW DELETION POLICY", PG, ast.AlterQueue("q", row_deletion="drop")),
    ("ALTER QUEUE Q SET INTERLEAVE IN PARENT Users", G, ast.AlterQueue("q", interleave=("Users", True))),
    ("GRANT ROLE Reader, spanner_info_reader TO ROLE a, b", G,
     ast.GrantRole(("reader", "spanner_info_reader"), ("a", "b"))),
    ("REVOKE ROLE reader FROM ROLE a", G, ast.GrantRole(("reader",), ("a",), revoke=True)),
    ("GRANT reader TO a", PG, ast.GrantRole(("reader",), ("a",))),
    ("REVOKE reader, writer FROM a", PG, ast.GrantRole(("reader", "writer"), ("a",), revoke=True)),
    ("ALTER QUEUE q SET (disable_send = true)", PG, ast.AlterQueue("q", options=ast.QueueOptions(disable_send=True))),
    ("ALTER QUEUE q RESET (disable_send, locality_group)", PG,
     ast.AlterQueue("q", options=ast.QueueOptions(reset=frozenset({"disable_send", "locality_group"})))),
    ("ALTER QUEUE q ALTER TTL INTERVAL '2 days' ON deliver_time", PG,
     ast.AlterQueue("q", row_deletion="replace", policy=ast.RowDeletionPolicy("deliver_time", 2))),
    ("ALTER QUEUE q DROP TTL", PG, ast.AlterQueue("q", row_deletion="drop")),
    # Proto type names keep their case, with or without backticks, a trailing comma read.
    ("CREATE PROTO BUNDLE (examples.shipping.Order, `examples.shipping.Order.Item`, pkg.`Enum`,)", G,
     ast.ProtoBundle("create", insert=("examples.shipping.Order", "examples.shipping.Order.Item", "pkg.Enum"))),
    ("ALTER PROTO BUNDLE INSERT (a.New) UPDATE (a.Old) DELETE (a.Gone, a.Gone)", G,
     ast.ProtoBundle("alter", ("a.New",), ("a.Old",), ("a.Gone",))),
    ("drop proto bundle;", G, ast.ProtoBundle("drop")),
])
def test_statements_read_into_the_syntax_tree(text: str, dialect: Dialect, expected: object) -> None:
    assert parse_ddl(text, dialect) == expected


def test_create_queue_keeps_what_getdatabaseddl_lists() -> None:
    s = parse_ddl("CREATE QUEUE Q (Id INT64 NOT NULL HIDDEN, M STRING(36) NOT NULL, Payload JSON NOT NULL) "
                  "PRIMARY KEY (Id, M), INTERLEAVE IN Users, ROW DELETION POLICY (OLDER_THAN(DeliverTime, "
                  "INTERVAL 7 DAY)), OPTIONS (receive_mode = 'PULL', disable_send = true, locality_group = 'hot')", G)
    assert isinstance(s, ast.CreateQueue)
    assert (s.hidden, s.declared, s.interleave_in, s.parent_table) == (("id",), (("id", "INT64"), ("m", "STRING(36)"),
                                                                                ("payload", "JSON")), "Users", None)
    assert s.row_deletion == ast.RowDeletionPolicy("delivertime", 7)
    assert s.options == ast.QueueOptions(disable_send=True, locality_group="hot", receive_mode=True)
    table = parse_ddl("CREATE TABLE T (Id INT64, O examples.Order, A ARRAY<`x.E`>) PRIMARY KEY (Id)", G)
    assert isinstance(table, ast.CreateTable)  # message or enum: the bundle says, when the DDL runs
    assert [c.type for c in table.columns[1:]] == [ast.SpannerType("PROTO", proto="examples.Order"),
                                                   ast.SpannerType("ARRAY", ast.SpannerType("PROTO", proto="x.E"))]
    proto = parse_ddl("CREATE QUEUE Q (Id INT64 NOT NULL, Payload examples.shipping.Order NOT NULL HIDDEN) "
                      "PRIMARY KEY (Id)", G)
    assert isinstance(proto, ast.CreateQueue)
    assert (proto.payload_proto, proto.declared[-1], proto.hidden) == (
        "examples.shipping.Order", ("payload", "examples.shipping.Order"), ("payload",))
    assert dict(proto.columns)["payload"] is ColumnType.BYTES


@pytest.mark.parametrize(("text", "words"), [
    ("GRANT UPDATE ON QUEUE q TO ROLE r", "UPDATE cannot be granted on a queue"),
    ("GRANT SELECT(Id) ON TABLE t TO ROLE r", "column privileges"),
    ("GRANT ROLE public TO ROLE b", "every role inherits its privileges already"),
    ("GRANT ROLE a TO ROLE spanner_sys_reader", "no role can be granted to it"),
    ("GRANT EXECUTE ON TABLE FUNCTION READ_q TO ROLE r", "is not one of a queue's"),
    ("GRANT SELECT ON QUEUE q TO r", "expected ROLE"),
    ("CREATE ROLE public", "system role"),
    ("CREATE ROLE `9lives`", "is not a role name"),
    ("CREATE QUEUE Q (Id INT64 NOT NULL, S INT64 AS (Id), Payload BYTES(MAX) NOT NULL) PRIMARY KEY (S, Id)",
     "a generated key column is AS (expr) STORED"),
    ("CREATE QUEUE Q (Id INT64 NOT NULL OPTIONS (x = 1), Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
     "unsupported column option"),
    ("CREATE QUEUE Q (Id INT64, Payload BYTES(MAX)) PRIMARY KEY (Id), INTERLEAVE IN U ON DELETE CASCADE",
     "ON DELETE goes with INTERLEAVE IN PARENT"),
    ("CREATE QUEUE Q (Id INT64, Payload BYTES(MAX)) PRIMARY KEY (Id), OPTIONS (locality_group = 'a b')",
     "not a locality group name"),
    ("ALTER QUEUE Q SET PAYLOAD", "expected OPTIONS, ON DELETE or INTERLEAVE IN"),
    ("CREATE QUEUE Q (Id a.B NOT NULL, Payload BYTES(MAX)) PRIMARY KEY (Id)", "a proto type is for Payload"),
    ("ALTER PROTO BUNDLE", "expected INSERT (...), UPDATE (...) or DELETE (...)"),
    ("ALTER PROTO BUNDLE DELETE (a.B) DELETE (a.C)", "DELETE is given twice"),
    ("CREATE PROTO BUNDLE ()", "a proto type's full name"),
])
def test_what_is_refused_says_why(text: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_ddl(text, G)


def test_proto_bundles_are_googlesqls() -> None:
    with pytest.raises(InvalidArgument, match="proto bundles are GoogleSQL's"):
        parse_ddl("CREATE PROTO BUNDLE (a.B)", PG)
@pytest.mark.parametrize(("expression", "generated_sql"), [
    ("MOD(ABS(FARM_FINGERPRINT(MessageId)), 16)", 'mod(abs(spanq.farm_fingerprint("messageid")), (16::bigint))'),
    ("LENGTH(MessageId) * 2 - 1", '((char_length("messageid") * (2::bigint)) - (1::bigint))'),
    ("CAST(SUBSTR(MessageId, 1, 2) = 'ab' AS INT64)", None),  # a comparison: refused
    ("FARM_FINGERPRINT(CONCAT(LOWER(MessageId), UPPER(MessageId)) || 'x')",
     """spanq.farm_fingerprint(((lower("messageid") || upper("messageid")) || ('x'::text)))"""),
    ("CAST(CAST(Flag AS STRING) AS INT64)", None),  # 'true' is no INT64, but the CAST itself is taken
])
def test_a_generated_key_columns_expression_is_translated_or_refused(expression: str, generated_sql: str | None) -> None:
    from spanq_server.spanner.query.executor import queue_from_ddl

    text = (f"CREATE QUEUE Q (S INT64 AS ({expression}) STORED, MessageId STRING(36) NOT NULL, Flag BOOL NOT NULL, "
            "Payload BYTES(MAX) NOT NULL) PRIMARY KEY (S, MessageId, Flag)")
    statement = parse_ddl(text, G)
    assert isinstance(statement, ast.CreateQueue)
    if generated_sql is None and "Flag" not in expression:
        with pytest.raises(InvalidArgument, match="a comparison is not taken in a generated column"):
            queue_from_ddl(statement)
        return
    column = queue_from_ddl(statement).key_columns[0]
    if generated_sql is not None:
        assert column.generated_sql.lstrip() == generated_sql  # type: ignore[union-attr]
    # The text GetDatabaseDdl lists reads back as the same expression.
    again = parse_ddl(text.replace(expression, column.generated_as or ""), G)
    assert isinstance(again, ast.CreateQueue) and again.generated == statement.generated


def test_generated_key_columns_are_googlesqls_only() -> None:
    with pytest.raises(InvalidArgument, match="GoogleSQL databases only"):
        parse_ddl("CREATE QUEUE q (s bigint GENERATED ALWAYS AS (1) STORED, id varchar NOT NULL, payload bytea NOT NULL, "
                  "PRIMARY KEY (s, id))", PG)
