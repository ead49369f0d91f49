"""The statement limits of the Spanner front-end's parsers (spanner/query/lexing.py), without a server:
length, tokens and nesting, each INVALID_ARGUMENT naming its limit in both parsers and both
dialects; literals unescaped in bulk as a reader would one by one; and the translation's
positions, aliases and PostgreSQL names (spanner/query/postgres.py)."""

import random
import re

import pytest

from spanq_server.ground.errors import InvalidArgument
from spanq_server.spanner.query import ast, parser
from spanq_server.spanner.query.parser import Dialect
from spanq_server.spanner.query.lexing import MAX_DEPTH, MAX_STATEMENT_LENGTH, MAX_TOKENS, unquote
from spanq_server.spanner.query.schema import Col, TableDef, table_of
from spanq_server.spanner.query import postgres as t

PARSERS = {"googlesql": parser.parse_table, "queues": parser.parse_queue,
           "queues, PostgreSQL": lambda text: parser.parse_queue(text, Dialect.POSTGRESQL)}


def limit_of(parse: object, text: str) -> str:
    with pytest.raises(InvalidArgument) as caught:
        parse(text)  # type: ignore[operator]
    return caught.value.metadata.get("limit", caught.value.message)


@pytest.mark.parametrize("parse", PARSERS.values(), ids=PARSERS.keys())
def test_length_and_tokens_are_checked_by_every_parser(parse: object) -> None:
    assert limit_of(parse, "SELECT '" + "x" * MAX_STATEMENT_LENGTH + "'") == "statement_length"
    assert limit_of(parse, "SELECT " + "1, " * MAX_TOKENS) == "statement_tokens"
    assert limit_of(parse, "(" * (MAX_TOKENS + 1)) == "statement_tokens"


def test_a_statement_at_the_length_and_token_limits_parses() -> None:
    head, tail = "SELECT Name FROM Users WHERE Name = '", "'"
    parser.parse_table(head + "x" * (MAX_STATEMENT_LENGTH - len(head) - len(tail)) + tail)
    values = (MAX_TOKENS - 8) // 2  # SELECT Name FROM Users WHERE UserId IN ( ... ) is 8 more
    parser.parse_table("SELECT Name FROM Users WHERE UserId IN (" + ", ".join(["1"] * values) + ")")


@pytest.mark.parametrize("nested", [
    lambda n: "(" * n + "true" + ")" * n,
    lambda n: "NOT " * n + "true",
    lambda n: "1 = " + " + ".join(["1"] * (n + 1)),
    lambda n: "1 = " + " * ".join(["1"] * (n + 1)),
    lambda n: "Tags = " + "[" * n + "]" * n,
    lambda n: "1 = " + "COUNT(" * n + "1" + ")" * n,
], ids=["parentheses", "NOT", "sum", "product", "arrays", "COUNT"])
def test_the_table_parser_nests_to_the_limit_and_no_deeper(nested: object) -> None:
    parser.parse_table("SELECT * FROM Users WHERE " + nested(MAX_DEPTH))  # type: ignore[operator]
    assert limit_of(parser.parse_table, "SELECT * FROM Users WHERE " + nested(MAX_DEPTH + 1)) == "statement_depth"  # type: ignore[operator]


def test_the_queue_parser_nests_arrays_and_timestamp_add_to_the_limit() -> None:
    parser.parse_queue("SELECT * FROM RENEWLEASE_q(" + "[" * MAX_DEPTH + "]" * MAX_DEPTH + ")")
    assert limit_of(parser.parse_queue, "SELECT * FROM RENEWLEASE_q(" + "[" * 76 + "]" * 76 + ")") == "statement_depth"
    add = "TIMESTAMP_ADD(" * (MAX_DEPTH + 1) + "CURRENT_TIMESTAMP()" + ", INTERVAL 1 SECOND)" * (MAX_DEPTH + 1)
    assert limit_of(parser.parse_queue, f"DELETE FROM q WHERE DeliverTime < {add}") == "statement_depth"


def _slow_unquote(body: str, as_bytes: bool) -> object:
    """The escapes read one by one, left to right: the reference the bulk replacement must equal."""
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`", "0": "\0"}
    out, i = bytearray(), 0
    while i < len(body):
        if body[i] == "\\":
            if body[i + 1] in "xX" and re.fullmatch(r"[0-9A-Fa-f]{2}", body[i + 2:i + 4]):
                code = int(body[i + 2:i + 4], 16)
                out += bytes([code]) if as_bytes else chr(code).encode()
                i += 4
                continue
            out += escapes[body[i + 1]].encode()
            i += 2
        else:
            out += body[i].encode()
            i += 1
    return bytes(out) if as_bytes else out.decode()


def test_literals_unescape_in_bulk_as_one_by_one() -> None:
    rng = random.Random(21)
    pieces = ["a", "é", " ", "\\\\", "\\n", "\\t", "\\'", '\\"', "\\`", "\\0", "\\r", "\\x41", "\\xff", "n", "x"]
    for _ in range(2000):
        body = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        for as_bytes in (False, True):
            assert unquote(f"'{body}'", False, as_bytes) == _slow_unquote(body, as_bytes), body
    for bad in ("\\q", "a\\\\\\q", "\\xZZ"):
        with pytest.raises(InvalidArgument, match="unsupported escape"):
            unquote(f"'{bad}'", False)


USERS = table_of(parser.parse_table("CREATE TABLE Users (UserId INT64 NOT NULL, Name STRING(MAX), Score INT64) "  # type: ignore[arg-type]
                         "PRIMARY KEY (UserId)"), "d1_users", None)


def sql_of(text: str) -> str:
    statement = parser.parse_table(text)
    assert isinstance(statement, (ast.Select, ast.Insert, ast.Update, ast.Delete))
    return t.translate(statement, {"users": USERS}, {}).statement.as_string(None)


def test_order_by_positions_and_aliases_are_the_columns_places() -> None:
    assert sql_of("SELECT UserId, Name FROM Users ORDER BY 2 DESC").endswith("ORDER BY 2 DESC NULLS LAST")
    assert sql_of("SELECT *, Score AS s FROM Users ORDER BY s").endswith("ORDER BY 4 NULLS FIRST")  # after *'s three
    for bad in ("SELECT Name FROM Users ORDER BY 2", "SELECT Name FROM Users ORDER BY -1"):
        with pytest.raises(InvalidArgument, match="a position in the SELECT list is 1 to 1"):
            sql_of(bad)


def test_relation_names_past_63_bytes_reach_postgresql_by_short_distinct_names() -> None:
    a, b = "a" * 63 + "1", "a" * 63 + "2"
    text = sql_of(f"SELECT {a}.Name FROM Users AS {a} JOIN Users AS {b} ON {a}.UserId = {b}.UserId")
    assert a not in text and b not in text and '"t0"."name"' in text and 'AS "t1"' in text
    assert t.pg_aliases(["t0", "x" * 64, "u"]) == {"x" * 64: "t1"}  # never a name the statement has
    assert '"u"."name"' in sql_of("SELECT u.Name FROM Users u")  # short names as written


def test_column_names_postgresql_reserves_or_cuts_are_refused() -> None:
    def table(*names: str) -> TableDef:
        return TableDef("d1_t", "T", tuple(Col(n.lower(), n, ast.INT64, n.lower()) for n in names), (names[0].lower(),))

    for names, words in [(("A", "ctid"), "system column"), (("A", "TableOid"), "system column"),
                         (("A", "é" * 32 + "x", "é" * 32 + "y"), "equal in their first 63 bytes")]:
        with pytest.raises(InvalidArgument, match=words):
            t.create_table(table(*names), None)
    t.create_table(table("A", "é" * 32, "é" * 31 + "y"), None)  # kept: 62 bytes (é is not cut in two) and 63


def test_many_keys_are_one_in_values_and_too_many_values_or_ranges_are_refused() -> None:
    params: dict[str, object] = {}
    condition = t.key_condition(USERS.key, [[1], [2], [3]], [], params).as_string(None)
    assert condition == '(("userid") IN (VALUES (%(k0)s::bigint), (%(k1)s::bigint), (%(k2)s::bigint)))'
    with pytest.raises(InvalidArgument, match="65,536 values, more than the 65,535") as caught:
        t.key_condition(USERS.key, [[i] for i in range(65_536)], [], {})
    assert caught.value.metadata["limit"] == "statement_values"
    ranges = [t.KeyRange((i,), True, (i + 1,), False) for i in range(t.MAX_RANGES + 1)]
    with pytest.raises(InvalidArgument, match="1,001 ranges"):
        t.key_condition(USERS.key, [], ranges, {})
    assert [len(b) for b in t.batches(list(range(70_000)), 2)] == [32_767, 32_767, 4_466]
