"""The store's array literals (store/arrays.py), read back by PostgreSQL as the values
they were made from."""

from spanq_server.store.arrays import array_literal, bytea_array_literal


def test_array_literals_read_back_as_the_values(sql):
    strings = ['plain', 'with "quotes"', "back\\slash", "comma, brace {}", "", "NULL", "ünï"]
    assert sql.execute("SELECT %s::text[]", [array_literal(strings)]).fetchone()[0] == strings
    assert sql.execute("SELECT %s::bigint[]", [array_literal([1, -2, 2**62])]).fetchone()[0] == [1, -2, 2**62]
    blobs = [b"", b"\x00\xff", b'"\\']
    assert [bytes(b) for b in sql.execute("SELECT %s::bytea[]", [bytea_array_literal(blobs)]).fetchone()[0]] == blobs
    assert array_literal([None, None]) is None  # unnest pads a NULL array
    assert array_literal(["a", None]) == ["a", None]  # psycopg adapts the rest
    assert array_literal(["nul\x00"]) == ["nul\x00"]
