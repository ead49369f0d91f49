"""spanq.farm_fingerprint (migration 0017), the PL/pgSQL FarmHash Fingerprint64 that generated key
columns and FARM_FINGERPRINT in SELECTs compute with, against an independent implementation:
pyfarmhash, which wraps FarmHash's own C++. Every length class of the algorithm (0 to 3, 4 to
7, 8 to 16, 17 to 32, 33 to 64, and longer in 64-byte blocks) over random bytes and text."""

import random
from typing import Any

import farmhash  # type: ignore[import-untyped]
import pytest

LENGTHS = [*range(0, 70), 95, 96, 127, 128, 129, 191, 192, 193, 255, 256, 257, 1000, 4096]
"""Every length to past the first block, then around the block boundaries."""


def signed(unsigned: int) -> int:
    return unsigned - 2**64 if unsigned >= 2**63 else unsigned


def test_it_is_fingerprint64_as_a_signed_int64_for_bytes_of_every_length(sql: Any) -> None:
    rng = random.Random(20261202)
    samples = [rng.randbytes(n) for n in LENGTHS for _ in range(8)]
    samples += [bytes([255]) * n for n in (1, 8, 17, 33, 65, 200)] + [bytes(n) for n in (1, 8, 17, 33, 65, 200)]
    got = sql.execute("SELECT spanq.farm_fingerprint(b) FROM unnest(%s::bytea[]) WITH ORDINALITY AS t(b, i) "
                      "ORDER BY i", (samples,)).fetchall()
    assert [row[0] for row in got] == [signed(farmhash.fingerprint64(b)) for b in samples]


def test_a_string_is_fingerprinted_as_its_utf8_bytes(sql: Any) -> None:
    rng = random.Random(7)
    alphabet = "abcXYZ019 -_é中😀"
    samples = ["".join(rng.choice(alphabet) for _ in range(n)) for n in (0, 1, 5, 12, 20, 31, 40, 63, 70, 130, 700)]
    got = sql.execute("SELECT spanq.farm_fingerprint(s) FROM unnest(%s::text[]) WITH ORDINALITY AS t(s, i) "
                      "ORDER BY i", (samples,)).fetchall()
    assert [row[0] for row in got] == [signed(farmhash.fingerprint64(s.encode())) for s in samples]


@pytest.mark.parametrize("text,expected", [
    # Spanner's documented examples (GoogleSQL's hash functions page):
    # FARM_FINGERPRINT(CONCAT(CAST(x AS STRING), y, CAST(z AS STRING))) of (1, "foo", true), ...
    ("1footrue", -1541654101129638711),
    ("2applefalse", 2794438866806483259),
    ("3true", -4880158226897771312),
])
def test_spanners_documented_values(sql: Any, text: str, expected: int) -> None:
    assert sql.execute("SELECT spanq.farm_fingerprint(%s::text)", (text,)).fetchone() == (expected,)


async def test_migration_0017_adds_the_function_to_a_database_made_before_it(database_url: str, sql: Any) -> None:
    from spanq_server.store import Store

    sql.execute("DROP FUNCTION spanq.farm_fingerprint(text), spanq.farm_fingerprint(bytea)")
    for helper in ("len16(bigint, bigint, bigint)", "weak32(bytea, integer, bigint, bigint)",
                   "fetch64(bytea, integer)", "fetch32(bytea, integer)", "shift_mix(bigint)", "rot(bigint, integer)",
                   "shr(bigint, integer)", "mul(bigint, bigint)", "add(bigint, bigint)", "wrap(numeric)"):
        sql.execute(f"DROP FUNCTION spanq.farmhash_{helper}")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 17")
    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [17]
    assert sql.execute("SELECT spanq.farm_fingerprint('1footrue'::text)").fetchone() == (-1541654101129638711,)
