"""Unit tests of the Spanner front-end's strict statement parser and value encoding."""

from datetime import datetime, timedelta, timezone

import pytest
from google.protobuf import struct_pb2

from spanq_server.ground.errors import InvalidArgument
from spanq_server.ground.model import ColumnType
from spanq_server.spanner.query import ast, parser
from spanq_server.spanner.query import values
from spanq_server.spanner.query.executor import queue_ddl, queue_from_ddl
from spanq_server.spanner.query.lexing import Token, fold
from spanq_server.spanner.query.parser import Dialect, Surface, parse_queue


def tokenize(text: str, pg: bool = False) -> list[Token]:
    """The queue surface's tokens, in GoogleSQL or (``pg``) PostgreSQL."""
    return parser.tokenize(text, Dialect.of(pg), Surface.QUEUE)


def test_create_queue_as_in_spanners_docs() -> None:
    parsed = parser.parse_ddl("""
        CREATE QUEUE UserTasks (
          UserId     INT64 NOT NULL,
          MessageId  STRING(36) NOT NULL,      -- UUID recommended
          Payload    BYTES(MAX) NOT NULL
        ) PRIMARY KEY (UserId, MessageId),
        INTERLEAVE IN PARENT Users ON DELETE CASCADE""", Dialect.GOOGLESQL)
    assert parsed == ast.CreateQueue("usertasks", (("userid", ColumnType.INT64), ("messageid", ColumnType.STRING),
                                                  ("payload", ColumnType.BYTES)), ("userid", "messageid"), "users")
    queue = queue_from_ddl(parsed)
    assert [c.name for c in queue.key_columns] == ["userid", "messageid"] and queue.parent_table == "users"
    assert queue_from_ddl(parser.parse_ddl(queue_ddl(queue), Dialect.GOOGLESQL)) == queue  # GetDatabaseDdl round-trips
    trailing = parser.parse_ddl("CREATE Queue MyQueue (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL,) "
                            "PRIMARY KEY (Id), OPTIONS (receive_mode = 'PULL')", Dialect.GOOGLESQL)
    assert trailing.name == "myqueue" and trailing.primary_key == ("id",)
    assert parser.parse_ddl("DROP QUEUE IF EXISTS `UserTasks`;", Dialect.GOOGLESQL) == ast.DropQueue("usertasks", True)


def test_names_fold_ascii_letters_only() -> None:
    """Spanner's names are ASCII and case-insensitive: A-Z fold to a-z, backquoted or not,
    and nothing else folds (str.lower() would make KELVIN SIGN a 'k', and the Turkish
    dotted I two characters)."""
    assert fold("UserTasks_2") == "usertasks_2"
    assert parse_queue("SELECT * FROM `UserTasks`").queue == parse_queue("select * from USERTASKS").queue == "usertasks"
    for other in ("\u212a", "\u0130", "\u00c9", "\uff21"):  # KELVIN SIGN, I WITH DOT ABOVE, E ACUTE, FULLWIDTH A
        assert fold(f"Q{other}") == f"q{other}"
        assert parse_queue(f"SELECT * FROM `Q{other}`").queue == f"q{other}"


@pytest.mark.parametrize("ddl, message", [
    ("CREATE TABLE T (Id INT64) PRIMARY KEY (Id)", "only CREATE QUEUE"),
    ("CREATE QUEUE Q (Id FLOAT64, Payload BYTES(MAX)) PRIMARY KEY (Id)", "FLOAT64"),
    ("CREATE QUEUE Q (Id INT64, Payload BYTES) PRIMARY KEY (Id)", "needs a length"),
    ("CREATE QUEUE Q (Id INT64, Payload BYTES(MAX)) PRIMARY KEY (Id), OPTIONS (receive_mode = 'PUSH')", "PULL"),
    ("CREATE QUEUE Q (Id INT64, Payload BYTES(MAX)) PRIMARY KEY (Id) garbage", "end of the statement"),
])
def test_unsupported_ddl_is_invalid_argument(ddl: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_queue(ddl)


@pytest.mark.parametrize("text, dialect, expected", [
    ("CREATE QUEUE q (Id STRING(", Dialect.GOOGLESQL, "a length or MAX"),
    ("CREATE QUEUE q (id varchar(", Dialect.POSTGRESQL, "a length"),
    ("DELETE FROM q WHERE Id = 1 ASSERT_ROWS_MODIFIED", Dialect.GOOGLESQL, "a row count after ASSERT_ROWS_MODIFIED"),
    ("SELECT * FROM q WHERE deliver_time <= CURRENT_TIMESTAMP - INTERVAL", Dialect.POSTGRESQL, "an interval like INTERVAL .1 hour."),
])
def test_a_statement_cut_where_a_rule_takes_a_token_says_what_it_expected(text: str, dialect: Dialect,
                                                                          expected: str) -> None:
    """The rule took the end of the statement as its token: its error names the end (it was an IndexError)."""
    with pytest.raises(InvalidArgument, match=f"expected {expected} but found the end of the statement"):
        parse_queue(text, dialect)


@pytest.mark.parametrize("ddl, message", [
    ("CREATE QUEUE Q (Id INT64) PRIMARY KEY (Id)", "needs a Payload"),
    ("CREATE QUEUE Q (Id INT64, Extra STRING(MAX), Payload BYTES(MAX)) PRIMARY KEY (Id)", "extra"),
    ("CREATE QUEUE Q (Id INT64, Payload BYTES(MAX)) PRIMARY KEY (Other)", "not defined"),
])
def test_queue_shapes_are_checked(ddl: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        queue_from_ddl(parser.parse_ddl(ddl, Dialect.GOOGLESQL))


def test_the_queue_statements() -> None:
    assert parse_queue("SELECT * FROM RECEIVE_UserTasks(max_duration => '20m', max_batch_size => 20)") == ast.Receive(
        "usertasks", {"max_duration": ast.Literal("20m", ast.STRING), "max_batch_size": ast.Literal(20, ast.INT64)})
    assert parse_queue("select * from receive_q()") == ast.Receive("q", {})
    assert parse_queue("SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => ['t1', 't2'])") == ast.RenewLease(
        "usertasks", ast.ArrayLiteral((ast.Literal("t1", ast.STRING), ast.Literal("t2", ast.STRING))))
    assert parse_queue("SELECT * FROM RENEWLEASE_Q(@tokens)") == ast.RenewLease("q", ast.Param("tokens"))
    assert parse_queue("DELETE FROM UserTasks WHERE UserId = @userId AND MessageId = 'm' ASSERT_ROWS_MODIFIED 1;") == \
        ast.QueueDelete("usertasks", (ast.Condition("userid", "=", ast.Param("userId")),
                                      ast.Condition("messageid", "=", ast.Literal("m", ast.STRING))), 1)
    insert = parse_queue("INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) VALUES "
                      "(123, 'id-1', b'\\x41bc', TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR)), "
                      "(-4, \"id-2\", B\"x\", CURRENT_TIMESTAMP())")
    assert insert == ast.QueueInsert("usertasks", ("userid", "messageid", "payload", "delivertime"), (
        (ast.Literal(123, ast.INT64), ast.Literal("id-1", ast.STRING), ast.Literal(b"Abc", ast.BYTES),
         ast.Now(timedelta(hours=1))),
        (ast.Literal(-4, ast.INT64), ast.Literal("id-2", ast.STRING), ast.Literal(b"x", ast.BYTES), ast.Now()),
    ))
    select = parse_queue("SELECT * FROM UserTasks WHERE DeliverTime <= CURRENT_TIMESTAMP() ORDER BY DeliverTime DESC "
                      "LIMIT 10")
    assert select == ast.QueueSelect("usertasks", None, (ast.Condition("delivertime", "<=", ast.Now()),),
                                     "delivertime", True, ast.Literal(10, ast.INT64))


@pytest.mark.parametrize("sql, message", [
    ("", "empty"),
    ("UPDATE UserTasks SET Payload = b'x' WHERE UserId = 1", "unsupported statement"),
    ("SELECT * FROM RECEIVE_Q(20, NULL, '20m')", "name RECEIVE's arguments"),
    ("SELECT * FROM RECEIVE_Q(max_wait => '1s')", "takes max_duration"),
    ("SELECT * FROM READ_Q()", "unknown table function"),
    ("DELETE FROM Q WHERE A = 1 OR B = 2", "AND"),
    ("INSERT INTO Q (A, B) VALUES (1)", "1 value"),
    ("SELECT * FROM Q; DROP TABLE Q", "end of the statement"),
    ("SELECT 'unterminated FROM Q", "cannot read"),
])
def test_everything_else_is_invalid_argument_naming_what_is_understood(sql: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_queue(sql)


def test_durations() -> None:
    assert parser.duration("20m", "d") == timedelta(minutes=20)
    assert parser.duration("1h30m", "d") == timedelta(minutes=90)
    assert parser.duration("500ms", "d") == timedelta(milliseconds=500)
    with pytest.raises(InvalidArgument):
        parser.duration("soon", "d")


def test_spanner_value_encoding() -> None:
    v = struct_pb2.Value
    assert values.decode(v(string_value="-9223372036854775808"), ColumnType.INT64, "k") == -(2**63)
    assert values.decode(v(string_value="aGk="), ColumnType.BYTES, "k") == b"hi"
    assert values.decode(v(string_value='{"a": [1]}'), ColumnType.JSON, "p") == {"a": [1]}
    when = datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=timezone.utc)
    assert values.decode(v(string_value="2026-01-02T03:04:05.12Z"), ColumnType.TIMESTAMP, "t") == when
    assert values.encode(when, ColumnType.TIMESTAMP).string_value == "2026-01-02T03:04:05.12Z"
    assert values.encode(2**62, ColumnType.INT64).string_value == str(2**62)
    assert values.encode(b"hi", ColumnType.BYTES).string_value == "aGk="
    for bad, column_type in [(v(string_value="9223372036854775808"), ColumnType.INT64),
                             (v(number_value=1.5), ColumnType.INT64),
                             (v(string_value="not base64!"), ColumnType.BYTES),
                             (v(null_value=0), ColumnType.STRING)]:
        with pytest.raises(InvalidArgument):
            values.decode(bad, column_type, "value")


@pytest.mark.parametrize("text, depth", [
    ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4),
    ('["]]]", "[[[", "\\"[["]', 1),  # brackets inside strings, escaped quotes
    ('[' * 10_000 + ']' * 10_000, 10_000),
])
def test_json_depth_counts_nesting_outside_strings(text: str, depth: int) -> None:
    assert values.json_depth(text) == depth


def test_year_one_and_microseconds_in_rfc3339() -> None:
    assert values.rfc3339(datetime(1, 1, 1, tzinfo=timezone.utc)) == "0001-01-01T00:00:00Z"
    assert values.rfc3339(datetime(999, 12, 31, 0, 0, 0, 500_000)) == "0999-12-31T00:00:00.5Z"
    assert values.timestamp("2026-01-01T00:00:00.000001Z", "t").microsecond == 1
    with pytest.raises(InvalidArgument, match="nanoseconds"):
        values.timestamp("2026-01-01T00:00:00.000000001Z", "t")


def test_declared_names_and_postgresql_ddl_round_trip() -> None:
    """GetDatabaseDdl gives back what parses to the same queue, its names as declared, in the
    database's dialect."""
    from spanq_server.spanner.query.names import Spelling

    google = parser.parse_ddl("CREATE QUEUE MyQueue (`Id` INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
                              Dialect.GOOGLESQL)
    text = queue_ddl(queue_from_ddl(google), Spelling.of_ddl(google))
    assert text == "CREATE QUEUE MyQueue (\n  Id INT64 NOT NULL,\n  Payload STRING(MAX) NOT NULL\n) PRIMARY KEY (Id)"
    pg = parser.parse_ddl('CREATE QUEUE "UserTasks" (UserId bigint NOT NULL, "Msg" text, payload jsonb NOT NULL, '
                      "PRIMARY KEY (userid, msg)) INTERLEAVE IN PARENT users ON DELETE CASCADE", Dialect.POSTGRESQL)
    assert dict(pg.spelled) == {"usertasks": "UserTasks", "userid": "userid", "msg": "Msg", "payload": "payload"}
    text = queue_ddl(queue_from_ddl(pg), Spelling.of_ddl(pg, pg=True))
    assert text.startswith('CREATE QUEUE "UserTasks" (\n  userid bigint NOT NULL,\n  "Msg" character varying')
    assert queue_from_ddl(parser.parse_ddl(text, Dialect.POSTGRESQL)) == queue_from_ddl(pg)


def test_select_lists_aliases_and_qualifiers() -> None:
    parsed = parse_queue("SELECT r.Id AS MessageId, Payload p FROM RECEIVE_q(max_duration => '1m') r WHERE r.Id <> 3")
    assert parsed == ast.Receive("q", {"max_duration": ast.Literal("1m", ast.STRING)},
                                (ast.Item("id", "MessageId"), ast.Item("payload", "p")),
                                (ast.Condition("id", "!=", ast.Literal(3, ast.INT64)),))
    with pytest.raises(InvalidArgument, match="'x' is not the FROM's name or alias"):
        parse_queue("SELECT x.Id FROM q AS r")
    with pytest.raises(InvalidArgument, match="RENEWLEASE_ takes no WHERE"):
        parse_queue("SELECT * FROM RENEWLEASE_q(['t']) WHERE x = 1")


# -- tokens, the PostgreSQL dialect, and the small parsers beside them ---------------------


def test_string_and_bytes_literals_unescape_and_raw_ones_do_not() -> None:
    [tok, _] = tokenize(r"'a\tb\x41\'c'")
    assert tok.value == "a\tbA'c"
    [raw, _] = tokenize(r"r'a\tb'")
    assert raw.value == r"a\tb"
    [blob, _] = tokenize(r"b'\xff\x00'")
    assert blob.kind == "bytes" and blob.value == b"\xff\x00"
    with pytest.raises(InvalidArgument, match=r"unsupported escape \\q"):
        tokenize(r"'\q'")
    [char, _] = tokenize(r"'\xff'")
    assert char.value == "\u00ff"  # in a string, \xHH is a character; in bytes, a byte


def test_comments_are_space_and_numbers_past_int64s_digits_are_refused_before_int() -> None:
    assert [t.kind for t in tokenize("1 -- a comment\n/* and\nanother */ # and this")] == ["number", "end"]
    assert tokenize("9223372036854775807")[0].value == 2**63 - 1
    assert tokenize("000" + "9" * 19)[0].value == int("9" * 19)  # leading zeros are not digits of the value
    with pytest.raises(InvalidArgument, match="has 20 digits"):
        tokenize("1" * 20)


def test_the_postgresql_dialect_quotes_names_with_double_quotes_and_numbers_its_parameters() -> None:
    name, param, arrow, string, _ = tokenize('"My""Queue" $2 := \'it\'\'s\'', pg=True)
    assert (name.kind, name.value, name.spelled) == ("ident", 'my"queue', 'My"Queue')
    assert (param.kind, param.value) == ("param", "p2")
    assert (arrow.kind, arrow.value) == ("punct", "=>")
    assert string.value == "it's"  # backslashes are plain, '' is a quote
    [plain, _] = tokenize("UserTasks", pg=True)
    assert (plain.value, plain.spelled) == ("usertasks", "usertasks")  # unquoted names fold, as shown
    with pytest.raises(InvalidArgument, match="cannot read"):
        tokenize("@named", pg=True)


def test_postgresql_intervals() -> None:
    assert parser.pg_interval("1 hour 30 minutes") == timedelta(minutes=90)
    assert parser.pg_interval("10 seconds") == timedelta(seconds=10)
    assert parser.pg_interval("1 day") == timedelta(days=1)
    for bad in ["", "1 fortnight", "1.5 hours", "hour"]:
        with pytest.raises(InvalidArgument, match="give whole units"):
            parser.pg_interval(bad)


def test_create_database_names() -> None:
    assert parser.parse_database_name("CREATE DATABASE orders") == "orders"
    assert parser.parse_database_name("create database `my-db`;") == "my-db"
    assert parser.parse_database_name('CREATE DATABASE "Quoted"') == "Quoted"
    for bad in ["CREATE TABLE t", "CREATE DATABASE a b", "CREATE DATABASE 1abc"]:
        with pytest.raises(InvalidArgument, match="must be CREATE DATABASE"):
            parser.parse_database_name(bad)


def test_durations_at_their_edges() -> None:
    assert parser.duration(" 1.5s ", "d") == timedelta(seconds=1.5)
    assert parser.duration("2D", "d") == timedelta(days=2)  # units in either case
    for bad in ["", "20", "20 m", "m20", "1h-5m"]:
        with pytest.raises(InvalidArgument, match="must be a duration"):
            parser.duration(bad, "max_duration")
    with pytest.raises(InvalidArgument, match="out of range"):
        parser.duration("9" * 15 + "d", "max_duration")
