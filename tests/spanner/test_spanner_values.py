"""Values written to Spanner tables stay in Spanner's ranges (issue 21), with the real
google-cloud-spanner client against a real server and PostgreSQL: DATE 0001-01-01 to
9999-12-31, TIMESTAMP years 1 to 9999 in UTC, NUMERIC of precision 38 and scale 9 (finite),
JSON nested at most 80 levels, no arrays of arrays. PostgreSQL holds more, and such a value
stored made every read of its table INTERNAL. Every way in is checked (literals,
parameters, mutations), and a value stored anyway (by psql) reads as FAILED_PRECONDITION
naming its column, not INTERNAL.
"""

import datetime
import decimal
from typing import Any

import psycopg
import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import KeySet, param_types

from .test_spanner_tables import make_database, run, spanner_env  # noqa: F401  (a fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

EVENTS = """CREATE TABLE Events (
  Id INT64 NOT NULL,
  Day DATE,
  At TIMESTAMP,
  Amount NUMERIC,
  Doc JSON,
  Counts ARRAY<INT64>,
  Days ARRAY<DATE>
) PRIMARY KEY (Id)"""
COLUMNS = ("Id", "Day", "At", "Amount", "Doc", "Counts", "Days")
DEEP = "[" * 3000 + "]" * 3000
DATE_RANGE = "0001-01-01 to 9999-12-31"
TIMESTAMP_RANGE = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"
NUMERIC_RANGE = "at most 29 digits before the point and 9 after it"


def stored(sql: psycopg.Connection, table: str) -> list[tuple[Any, ...]]:
    """The table's rows as PostgreSQL's text (nothing a Python loader could fail on)."""
    return sql.execute(f"SELECT t::text FROM {table} AS t ORDER BY id").fetchall()


def table_of(sql: psycopg.Connection, database_id: str) -> str:
    (namespace,) = sql.execute("SELECT namespace FROM spanq.spanner_databases WHERE name LIKE %s",
                               (f"%/{database_id}",)).fetchone()
    return f"{namespace}events"


def good_row(database: Any) -> None:
    def insert(txn: Any) -> None:
        txn.execute_update("INSERT INTO Events (Id, Day, At, Amount, Doc, Counts, Days) VALUES (1, DATE '2026-01-31', "
                           "TIMESTAMP '2026-01-31T10:00:00Z', NUMERIC '12.5', JSON '{\"a\": [1]}', [1, 2], "
                           "[DATE '0001-01-01', DATE '9999-12-31'])")

    database.run_in_transaction(insert)


def read_all(database: Any) -> tuple[list[Any], list[Any]]:
    with database.snapshot(multi_use=True) as snapshot:
        selected = list(snapshot.execute_sql("SELECT * FROM Events ORDER BY Id"))
        read = list(snapshot.read("Events", COLUMNS, KeySet(all_=True)))
    return selected, read


async def test_out_of_range_literals_are_invalid_naming_the_column_and_store_nothing(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    cases = [
        ("Day", "DATE '10000-01-01'", DATE_RANGE),
        ("Day", "DATE 'infinity'", DATE_RANGE),
        ("Day", "DATE '0044-03-15 BC'", DATE_RANGE),
        ("Day", "'10000-01-01'", DATE_RANGE),  # a string literal coerced to the column's DATE
        ("At", "TIMESTAMP 'infinity'", TIMESTAMP_RANGE),
        ("At", "TIMESTAMP '10000-01-01T00:00:00Z'", TIMESTAMP_RANGE),
        ("At", "TIMESTAMP '0001-01-01 00:00:00+01'", TIMESTAMP_RANGE),  # year 0 in UTC
        ("At", "TIMESTAMP '9999-12-31 23:00:00 America/New_York'", TIMESTAMP_RANGE),
        ("At", "'epoch'", TIMESTAMP_RANGE),
        ("Amount", "NUMERIC 'NaN'", NUMERIC_RANGE),
        ("Amount", "NUMERIC '1e29'", NUMERIC_RANGE),
        ("Amount", "NUMERIC '0.0000000001'", NUMERIC_RANGE),
        ("Amount", "1e40", NUMERIC_RANGE),
        ("Doc", f"JSON '{DEEP}'", "at most 80"),
        ("Doc", f"'{'[' * 81 + ']' * 81}'", "at most 80"),
        ("Counts", "[[1, 2], [3, 4]]", "arrays of arrays"),
        ("Days", "[DATE '2026-01-01', DATE 'infinity']", DATE_RANGE),
    ]

    def scenario() -> list[tuple[str, str]]:
        database = make_database("literals", [EVENTS])
        good_row(database)
        before = stored(sql, table_of(sql, "literals"))
        seen = []
        for column, text, words in cases:
            for statement in (f"INSERT INTO Events (Id, {column}) VALUES (2, {text})",
                              f"UPDATE Events SET {column} = {text} WHERE Id = 1",
                              f"INSERT OR UPDATE INTO Events (Id, {column}) VALUES (1, {text})"):
                with pytest.raises(exceptions.InvalidArgument) as caught:
                    database.run_in_transaction(lambda txn: txn.execute_update(statement))
                message = caught.value.message
                assert f"column {column}" in message and words in message, (statement[:90], message)
                seen.append((statement[:60], message[:160]))
        # A NUMERIC computed past the range (from values within it) is refused too.
        for statement in ("UPDATE Events SET Amount = Amount * NUMERIC '1e28' WHERE Id = 1",
                          "INSERT INTO Events (Id, Amount) VALUES (2, NUMERIC '99999999999999999999999999999' + 1)"):
            with pytest.raises(exceptions.InvalidArgument, match="numeric field overflow"):
                database.run_in_transaction(lambda txn: txn.execute_update(statement))
        # Nothing changed, and the table reads whole.
        assert stored(sql, table_of(sql, "literals")) == before
        selected, read = read_all(database)
        assert [r[0] for r in selected] == [1] and [r[0] for r in read] == [1]
        return seen

    seen = await run(scenario)
    assert len(seen) == 3 * len(cases)


async def test_the_edges_of_the_ranges_are_values(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> list[list[Any]]:
        database = make_database("edges", [EVENTS])

        def insert(txn: Any) -> None:
            txn.execute_update(
                "INSERT INTO Events (Id, Day, At, Amount, Doc) VALUES "
                "(10, DATE '0001-01-01', TIMESTAMP '0001-01-01T00:00:00Z', "
                f"NUMERIC '99999999999999999999999999999.999999999', JSON '{'[' * 80 + ']' * 80}'), "
                "(11, '9999-12-31', TIMESTAMP '9999-12-31 23:59:59.999999+00', NUMERIC '-0.000000001', NULL), "
                "(12, DATE '2026-7-1', TIMESTAMP '2026-07-01 00:00:00 America/Los_Angeles', "
                "NUMERIC '1.500000000000', NULL)")
            # Arithmetic rounds to 9 places, as Spanner's NUMERIC does.
            txn.execute_update("UPDATE Events SET Amount = NUMERIC '0.00003' * NUMERIC '0.0000255' WHERE Id = 11")

        database.run_in_transaction(insert)
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql("SELECT Day, At, Amount FROM Events ORDER BY Id"))

    rows = await run(scenario)
    utc = datetime.timezone.utc
    assert [[d, at.replace(tzinfo=utc) if at.tzinfo is None else at.astimezone(utc), n] for d, at, n in rows] == [
        [datetime.date(1, 1, 1), datetime.datetime(1, 1, 1, tzinfo=utc),
         decimal.Decimal("99999999999999999999999999999.999999999")],
        [datetime.date(9999, 12, 31), datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
         decimal.Decimal("0.000000001")],  # 0.000000000765 rounded
        [datetime.date(2026, 7, 1), datetime.datetime(2026, 7, 1, 7, tzinfo=utc), decimal.Decimal("1.5")]]


async def test_out_of_range_parameters_are_invalid_and_store_nothing(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    # Given as the wire carries them (strings), past what the client's own types could hold.
    cases = [
        ("Day", "10000-01-01", param_types.DATE, DATE_RANGE),
        ("Day", "infinity", param_types.DATE, DATE_RANGE),
        ("At", "10000-01-01T00:00:00Z", param_types.TIMESTAMP, TIMESTAMP_RANGE),
        ("At", "0000-12-31T23:00:00Z", param_types.TIMESTAMP, TIMESTAMP_RANGE),
        ("Amount", "NaN", param_types.NUMERIC, NUMERIC_RANGE),
        ("Amount", "-1e29", param_types.NUMERIC, NUMERIC_RANGE),
        ("Amount", "1.0000000001", param_types.NUMERIC, NUMERIC_RANGE),
        ("Doc", DEEP, param_types.JSON, "at most 80"),
        ("Counts", [[1, 2]], param_types.Array(param_types.INT64), "cannot be given as a list"),
    ]

    def scenario() -> list[str]:
        database = make_database("params", [EVENTS])
        good_row(database)
        before = stored(sql, table_of(sql, "params"))
        seen = []
        for column, value, declared, words in cases:
            for statement in (f"INSERT INTO Events (Id, {column}) VALUES (2, @v)",
                              f"UPDATE Events SET {column} = @v WHERE Id = 1"):
                for types in ({"v": declared}, None):  # declared, and typed by the column it meets
                    with pytest.raises(exceptions.InvalidArgument) as caught:
                        database.run_in_transaction(lambda txn: txn.execute_update(
                            statement, params={"v": value}, param_types=types))
                    message = caught.value.message
                    assert "parameter @v" in message and words in message, (statement, str(value)[:40], message)
                    seen.append(message)
        assert stored(sql, table_of(sql, "params")) == before
        selected, read = read_all(database)
        assert [r[0] for r in selected] == [1] and [r[0] for r in read] == [1]
        return seen

    assert len(await run(scenario)) == 4 * len(cases)


async def test_out_of_range_mutation_values_are_invalid_and_store_nothing(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    cases = [
        ("Day", "10000-01-01", DATE_RANGE),
        ("At", "infinity", TIMESTAMP_RANGE),
        ("Amount", "NaN", NUMERIC_RANGE),
        ("Amount", "123456789012345678901234567890", NUMERIC_RANGE),
        ("Amount", "0.1234567891", NUMERIC_RANGE),
        ("Doc", DEEP, "at most 80"),
        ("Counts", [[1, 2]], "cannot be given as a list"),
        ("Days", ["2026-01-01", "0000-01-01"], DATE_RANGE),
    ]

    def scenario() -> list[str]:
        database = make_database("mutations", [EVENTS])
        good_row(database)
        before = stored(sql, table_of(sql, "mutations"))
        seen = []
        for column, value, words in cases:
            for kind in ("insert", "update", "insert_or_update", "replace"):
                key = 2 if kind == "insert" else 1
                with pytest.raises(exceptions.InvalidArgument) as caught:
                    with database.batch() as batch:
                        getattr(batch, kind)("Events", ("Id", column), [(key, value)])
                message = caught.value.message
                assert f"row 0: column {column!r}" in message and words in message, (kind, column, message)
                seen.append(message)
        assert stored(sql, table_of(sql, "mutations")) == before
        selected, read = read_all(database)
        assert [r[0] for r in selected] == [1] and [r[0] for r in read] == [1]
        return seen

    assert len(await run(scenario)) == 4 * len(cases)


async def test_values_psql_stored_out_of_range_read_as_failed_precondition_naming_them(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    """What the API no longer stores, psql still may: a read that meets it says which column holds
    what (FAILED_PRECONDITION), never INTERNAL; the other columns and rows stay readable, and
    the row can be fixed through the API."""
    poison = [
        ("day", "'infinity'", "Day", "'infinity'"),
        ("day", "'0044-03-15 BC'", "Day", "'0044-03-15 BC'"),
        ("at", "'10000-01-01T00:00:00Z'", "At", "'10000-01-01 00:00:00+00'"),
        ("doc", f"'{DEEP}'", "Doc", "JSON nested too deep to read"),
        ("counts", "'{{1,2},{3,4}}'", "Counts", "a 2-dimensional array"),
        ("days", "ARRAY['2026-01-01', 'infinity']::date[]", "Days", "'infinity'"),
    ]

    def scenario() -> None:
        database = make_database("poisoned", [EVENTS])
        good_row(database)
        table = table_of(sql, "poisoned")
        for pg_column, value, column, shown in poison:
            sql.execute(f"INSERT INTO {table} (id, {pg_column}) VALUES (2, {value})")
            with pytest.raises(exceptions.FailedPrecondition) as caught:
                with database.snapshot() as snapshot:
                    list(snapshot.execute_sql("SELECT * FROM Events"))
            message = caught.value.message
            assert f"column {column}" in message and shown in message and "by hand" in message, message
            with pytest.raises(exceptions.FailedPrecondition, match=f"a Read of Events: column {column}"):
                with database.snapshot() as snapshot:
                    list(snapshot.read("Events", COLUMNS, KeySet(all_=True)))
            with database.snapshot(multi_use=True) as snapshot:  # the rest of the table reads
                assert list(snapshot.execute_sql("SELECT Id FROM Events ORDER BY Id")) == [[1], [2]]
                assert len(list(snapshot.read("Events", COLUMNS, KeySet(keys=[[1]])))) == 1
            # In a read-write transaction too, where a THEN RETURN that meets it changes nothing
            # (the transaction goes on and commits), and the row can be deleted through the API.
            with pytest.raises(exceptions.FailedPrecondition, match=f"column {column}"):
                database.run_in_transaction(lambda txn: list(txn.execute_sql("SELECT * FROM Events")))
            before = stored(sql, table)

            def update_returning(txn: Any) -> None:
                txn.execute_update("UPDATE Events SET Amount = 8 WHERE Id = 1")  # begins the transaction
                with pytest.raises(exceptions.FailedPrecondition, match=f"column {column}"):
                    list(txn.execute_sql("UPDATE Events SET Amount = 7 WHERE true THEN RETURN *"))

            database.run_in_transaction(update_returning)
            after = stored(sql, table)
            assert after[1] == before[1] and after[0] == (before[0][0].replace(",12.5,", ",8,"),), (before, after)
            sql.execute(f"UPDATE {table} SET amount = 12.5 WHERE id = 1")
            database.run_in_transaction(lambda txn: txn.execute_update("DELETE FROM Events WHERE Id = 2"))
            selected, read = read_all(database)
            assert [r[0] for r in selected] == [1] and [r[0] for r in read] == [1]

    await run(scenario)
