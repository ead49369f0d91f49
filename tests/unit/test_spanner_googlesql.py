"""The GoogleSQL table subset, statement by statement, without PostgreSQL: GoogleSQL in,
PostgreSQL text and parameters out (spanner/query/parser.py parses, spanner/query/postgres.py composes),
and every statement outside the subset INVALID_ARGUMENT naming what is not supported."""

from datetime import date
from decimal import Decimal

import pytest

from spanq_server.ground.errors import InvalidArgument
from spanq_server.spanner.query import ast, parser
from spanq_server.spanner.query.schema import Col, TableDef, index_of, table_of
from spanq_server.spanner.query import postgres as t

USERS = table_of(parser.parse_table(  # type: ignore[arg-type]
    "CREATE TABLE Users (UserId INT64 NOT NULL, Name STRING(10), Score FLOAT64, Born DATE, "
    "Tags ARRAY<STRING(MAX)>, Doc JSON) PRIMARY KEY (UserId)"), "d1_users", None)
INBOX = TableDef("d1_inbox", "Inbox", (Col("userid", "UserId", ast.INT64, "userid", True),
                                       Col("payload", "Payload", ast.STRING, "payload", True),
                                       Col("delivertime", "DeliverTime", ast.TIMESTAMP, "deliver_time")),
                 ("userid",), queue=True)
SCHEMA = {"users": USERS, "inbox": INBOX}
U = '"public"."d1_users"'


def pg(text: str, lock: bool = False, **declared: ast.SpannerType) -> tuple[str, dict, dict]:  # type: ignore[type-arg]
    statement = parser.parse_table(text)
    assert isinstance(statement, (ast.Select, ast.Insert, ast.Update, ast.Delete))
    out = t.translate(statement, SCHEMA, declared, lock)
    return out.statement.as_string(None), out.params, out.wanted


TRANSLATIONS = [
    ("SELECT Name FROM Users WHERE UserId = 1",
     f'SELECT "users"."name" FROM {U} AS "users" WHERE ("users"."userid" = %(l0)s::bigint)', {"l0": 1}),
    ("SELECT u.Name FROM Users AS u WHERE u.Score >= 1.5 AND u.Name != 'x'",
     f'SELECT "u"."name" FROM {U} AS "u" WHERE (("u"."score" >= %(l0)s::double precision) AND '
     '("u"."name" <> %(l1)s::text))', {"l0": 1.5, "l1": "x"}),
    ("select count(*) from Users where Name like 'A%' or not (Born is null)",
     f'SELECT count(*) FROM {U} AS "users" WHERE (("users"."name" LIKE %(l0)s::text) OR '
     '(NOT ("users"."born" IS NULL)))', {"l0": "A%"}),
    ("SELECT UserId FROM Users WHERE UserId IN (1, 2) AND Born < '2020-01-01' ORDER BY UserId DESC LIMIT 5",
     f'SELECT "users"."userid" FROM {U} AS "users" WHERE (("users"."userid" IN (%(l0)s::bigint, %(l1)s::bigint)) '
     'AND ("users"."born" < %(l2)s::date)) ORDER BY "users"."userid" DESC NULLS LAST LIMIT %(l3)s::bigint',
     {"l0": 1, "l1": 2, "l2": date(2020, 1, 1), "l3": 5}),  # a DATE literal is checked, bound as a date
    ("SELECT q.Payload, u.Name FROM Inbox q JOIN Users u ON u.UserId = q.UserId",
     'SELECT "q"."payload", "u"."name" FROM "public"."d1_inbox" AS "q" INNER JOIN ' + U +
     ' AS "u" ON ("u"."userid" = "q"."userid")', {}),
    ("INSERT INTO Users (UserId, Name) VALUES (1, 'a'), (2, NULL) THEN RETURN UserId",
     f'INSERT INTO {U} AS "d1_users" ("userid", "name") VALUES (%(l0)s::bigint, %(l1)s::text), '
     '(%(l2)s::bigint, NULL::text) RETURNING "d1_users"."userid"', {"l0": 1, "l1": "a", "l2": 2}),
    ("INSERT OR IGNORE INTO Users (UserId) VALUES (1)",
     f'INSERT INTO {U} AS "d1_users" ("userid") VALUES (%(l0)s::bigint) ON CONFLICT ("userid") DO NOTHING',
     {"l0": 1}),
    ("UPDATE Users SET Score = Score * 2 WHERE Name IS NOT NULL",
     f'UPDATE {U} AS "users" SET "score" = ("users"."score" * %(l0)s::double precision) WHERE '
     '("users"."name" IS NOT NULL)', {"l0": 2}),
    ("DELETE FROM Users WHERE true", f'DELETE FROM {U} AS "users" WHERE %(l0)s::boolean', {"l0": True}),
]


@pytest.mark.parametrize("text,expected,params", TRANSLATIONS, ids=[x[0][:40] for x in TRANSLATIONS])
def test_each_statement_translates_to_postgresql_with_values_as_parameters(text: str, expected: str,
                                                                          params: dict) -> None:  # type: ignore[type-arg]
    statement, found, _ = pg(text)
    assert statement == expected
    assert found == params


def test_parameters_take_their_declared_type_else_the_column_they_meet() -> None:
    statement, _, wanted = pg("SELECT Name FROM Users WHERE UserId = @id AND Born > @born AND Name IN UNNEST(@names)",
                              born=ast.DATE)
    assert '"users"."userid" = %(p_id)s::bigint' in statement
    assert '"users"."born" > %(p_born)s::date' in statement
    assert '"users"."name" = ANY(%(p_names)s::text[])' in statement
    assert wanted == {"id": ast.INT64, "born": ast.DATE, "names": ast.SpannerType("ARRAY", ast.STRING)}


def test_reads_in_read_write_transactions_lock_the_tables_rows_they_read() -> None:
    assert pg("SELECT Name FROM Users", lock=True)[0].endswith('FOR SHARE OF "users"')
    assert "FOR SHARE" not in pg("SELECT COUNT(*) FROM Users", lock=True)[0]  # an aggregate locks nothing
    assert "FOR SHARE" not in pg("SELECT Payload FROM Inbox", lock=True)[0]  # nor a queue's rows


def test_user_text_reaches_postgresql_only_as_identifiers_and_parameters() -> None:
    statement, params, _ = pg("SELECT Name FROM Users AS `x\"; DROP TABLE y; --` WHERE Name = 'a\\'; DROP'")
    assert '"x""; drop table y; --"."name"' in statement  # quoted as one identifier (folded, as names are)
    assert "DROP'" not in statement and params == {"l0": "a'; DROP"}


def test_ddl_types_and_interleaving() -> None:
    orders = table_of(parser.parse_table(  # type: ignore[arg-type]
        "CREATE TABLE Orders (UserId INT64 NOT NULL, OrderId INT64 NOT NULL, Amount NUMERIC, Pic BYTES(16)) "
        "PRIMARY KEY (UserId, OrderId), INTERLEAVE IN PARENT Users ON DELETE CASCADE"), "d1_orders", "d1_users")
    (ddl,) = t.create_table(orders, USERS)
    text = ddl.as_string(None)
    assert '"amount" numeric' in text and 'CHECK (octet_length("pic") <= 16)' in text
    assert 'FOREIGN KEY ("userid") REFERENCES "public"."d1_users" ("userid") ON DELETE CASCADE' in text
    (users,) = t.create_table(USERS, None)
    assert '"name" varchar(10) COLLATE "C"' in users.as_string(None)
    assert '"tags" text[] COLLATE "C"' in users.as_string(None) and '"doc" jsonb' in users.as_string(None)
    index = index_of(parser.parse_table("CREATE UNIQUE NULL_FILTERED INDEX ByName ON Users (Name DESC)"),  # type: ignore[arg-type]
                     "d1_byname", USERS, None)
    assert t.create_index(index, USERS).as_string(None) == (
        'CREATE UNIQUE INDEX "d1_byname" ON "public"."d1_users" ("name" DESC) WHERE "name" IS NOT NULL')


def test_key_sets_are_conditions_on_the_key_prefix() -> None:
    params: dict = {}  # type: ignore[type-arg]
    key = USERS.key
    condition = t.key_condition(key, [[1]], [t.KeyRange((5,), True, (), False)], params)
    assert condition.as_string(None) == ('(ROW("userid") = ROW(%(k0)s::bigint) OR (ROW("userid") >= '
                                         'ROW(%(k1)s::bigint)))')
    assert params == {"k0": 1, "k1": 5}
    assert t.key_condition(key, [], [], {}).as_string(None) == "false"


@pytest.mark.parametrize("text,words", [
    ("SELECT Name FROM Users INTERSECT DISTINCT SELECT Name FROM Users", "INTERSECT"),
    ("SELECT Name, COUNT(*) FROM Users", "neither grouped nor aggregated"),
    ("SELECT * FROM Users u RIGHT JOIN Inbox i ON u.UserId = i.UserId", "RIGHT JOIN"),
    ("SELECT * FROM (SELECT 1)", "subquery"),
    ("SELECT UPPER(Name) FROM Users", "UPPER"),
    ("SELECT Nope FROM Users", "Unrecognized name: Nope"),
    ("SELECT UserId FROM Users u JOIN Inbox i ON true", "ambiguous"),
    ("SELECT * FROM Nowhere", "Table not found: nowhere"),
    ("UPDATE Users SET Name = 'x'", "needs a WHERE"),
    ("UPDATE Users SET UserId = 2 WHERE true", "primary-key"),
    ("DELETE FROM Inbox WHERE Payload = 'x'", "is a queue"),
    ("SELECT * FROM Users WHERE Doc = '{}'", "JSON"),
    ("SELECT * FROM Users WHERE Name = 1", "does not fit"),
    ("WITH x AS (SELECT 1) SELECT * FROM x", "WITH"),
    ("INSERT INTO Users (UserId) SELECT 1", "INSERT ... SELECT"),
    ("SELECT * FROM Users UNION DISTINCT SELECT * FROM Users", "UNION DISTINCT"),
])
def test_anything_outside_the_subset_is_invalid_argument_naming_it(text: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        pg(text)


@pytest.mark.parametrize("text,words", [
    ("CREATE TABLE T (A INT64, B INTERVAL) PRIMARY KEY (A)", "INTERVAL"),
    ("CREATE TABLE T (A STRING) PRIMARY KEY (A)", "length"),
    ("CREATE TABLE T (A ARRAY<ARRAY<INT64>>) PRIMARY KEY (A)", "ARRAY of ARRAYs"),
    ("CREATE TABLE T (A INT64 DEFAULT (1)) PRIMARY KEY (A)", "DEFAULT"),
    ("CREATE TABLE T (A INT64, CONSTRAINT c CHECK (A > 0)) PRIMARY KEY (A)", "table constraint"),
    ("CREATE TABLE T (A INT64) PRIMARY KEY (A), ROW DELETION POLICY (OLDER_THAN(A, INTERVAL 1 DAY))", "ROW DELETION"),
    ("CREATE VIEW V AS SELECT 1", "CREATE VIEW"),
])
def test_unsupported_ddl_is_invalid_argument_naming_it(text: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        parser.parse_table(text)


def test_table_definitions_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="'nope' is not defined"):
        table_of(parser.parse_table("CREATE TABLE T (A INT64) PRIMARY KEY (Nope)"), "t", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="defined twice"):
        table_of(parser.parse_table("CREATE TABLE T (A INT64, a INT64) PRIMARY KEY (A)"), "t", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="cannot be part of the primary key"):
        table_of(parser.parse_table("CREATE TABLE T (A JSON) PRIMARY KEY (A)"), "t", None)  # type: ignore[arg-type]


def test_literals() -> None:
    assert parser.parse_table("SELECT NUMERIC '1.5', DATE '2020-01-02', -3, 2.5e3, b'\\x01', r'\\n'") == ast.Select((
        ast.SelectItem(ast.TypedLiteral(ast.NUMERIC, "1.5")), ast.SelectItem(ast.TypedLiteral(ast.DATE, "2020-01-02")),
        ast.SelectItem(ast.Literal(-3, ast.INT64)), ast.SelectItem(ast.Literal(2500.0, ast.FLOAT64)),
        ast.SelectItem(ast.Literal(b"\x01", ast.BYTES)), ast.SelectItem(ast.Literal("\\n", ast.STRING))))
    assert Decimal("1.5")  # NUMERIC text goes to PostgreSQL as text, cast to numeric
