"""The GA queue DDL's clauses in one queue, as a Spanner team's schema would write them: a proto
Payload, a generated HIDDEN shard column, a DESC key column, interleaving in a table, a row
deletion policy, options, a role granted through another role. Each clause has its own tests
(test_spanner_protos, test_spanner_generated_keys, test_spanner_desc_keys, test_spanner_ga_ddl,
test_spanner_roles); these check that they compose: the listing reads back into an equal
database, and a send, a receive by the inheriting role and an ack see the one queue."""

from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from . import test_spanner_protos as protos
from .test_spanner_generated_keys import fingerprint
from .conftest import run

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = protos.PROJECT, protos.INSTANCE
SCHEMA = [
    "CREATE PROTO BUNDLE (examples.shipping.Order)",
    "CREATE TABLE Users (UserId INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (UserId)",
    """CREATE QUEUE Orders (
      UserId INT64 NOT NULL,
      ShardId INT64 AS (MOD(ABS(FARM_FINGERPRINT(MessageId)), 4)) STORED HIDDEN,
      MessageId STRING(36) NOT NULL,
      Payload examples.shipping.Order NOT NULL
    ) PRIMARY KEY (UserId, ShardId, MessageId DESC),
      INTERLEAVE IN PARENT Users ON DELETE CASCADE,
      ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY)),
      OPTIONS (locality_group = 'hot')""",
    "CREATE ROLE Workers",
    "CREATE ROLE Alice",
    "GRANT SELECT, DELETE ON QUEUE Orders TO ROLE Workers",
    "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_Orders TO ROLE Workers",
    "GRANT ROLE Workers TO ROLE Alice",
]


def make_database(database_id: str, ddl: list[str]) -> Any:
    return protos.make_database(database_id, ddl, protos.DESCRIPTORS)


def as_role(database: Any, role: str) -> Any:
    return spanner.Client(project=PROJECT).instance(INSTANCE).database(database.database_id, database_role=role)


def send(database: Any, user: int, message_id: str, order: Any) -> None:
    with database.batch() as batch:
        batch.send(queue="Orders", key=[user, message_id], payload=order)


def receive(database: Any) -> tuple[list[str], list[Any]]:
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql("SELECT r.* FROM RECEIVE_Orders(max_duration => '1s') AS r",
                                       column_info={"Payload": protos.Order()})
        rows = list(results)
        return [f.name for f in results.fields], rows


def ack(database: Any, keys: list[list[Any]]) -> None:
    with database.batch() as batch:
        for key in keys:
            batch.ack(queue="Orders", key=key)


def select(database: Any, text: str) -> list[Any]:
    with database.snapshot() as snapshot:
        return [list(r) for r in snapshot.execute_sql(text)]


def write(database: Any, verb: str, *args: Any) -> None:
    with database.batch() as batch:
        getattr(batch, verb)(*args)


async def test_every_clause_in_one_queue_lists_back_and_serves(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "together", SCHEMA)
    listed, descriptors = await run(protos.ddl_of, database)
    queue = next(s for s in listed if s.startswith("CREATE QUEUE"))
    assert "ShardId INT64 AS (MOD(ABS(FARM_FINGERPRINT(MessageId)), 4)) STORED HIDDEN" in queue
    assert "Payload examples.shipping.Order NOT NULL" in queue
    assert "PRIMARY KEY (UserId, ShardId, MessageId DESC)" in queue
    assert "INTERLEAVE IN PARENT Users ON DELETE CASCADE" in queue
    assert "ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY))" in queue
    assert "locality_group = 'hot'" in queue
    assert "GRANT ROLE Workers TO ROLE Alice" in listed
    # The listing is a schema: a database made from it lists the same, and running it again
    # (IF NOT EXISTS where the grammar has it) changes nothing.
    copy = await run(make_database, "together_copy", listed)
    assert await run(protos.ddl_of, copy) == (listed, descriptors)
    await run(protos.update_ddl, database, [queue.replace("CREATE QUEUE", "CREATE QUEUE IF NOT EXISTS", 1)])
    assert (await run(protos.ddl_of, database))[0] == listed

    await run(write, database, "insert", "Users", ["UserId", "Name"], [[1, "ann"]])
    ids = ["a-1", "c-3", "b-2"]
    for i, message_id in enumerate(ids):
        await run(send, database, 1, message_id, protos.Order(order_id=message_id, quantity=i))

    # Alice holds no grant of her own: Workers' come to her through GRANT ROLE.
    alice = as_role(database, "Alice")
    names, rows = await run(receive, alice)
    assert "ShardId" not in names  # HIDDEN: r.* leaves it out
    assert sorted(r[names.index("MessageId")] for r in rows) == sorted(ids)
    assert {r[names.index("Payload")].order_id for r in rows} == set(ids)
    stored = await run(select, alice, "SELECT UserId, ShardId, MessageId FROM Orders")
    # Rows in key order: by shard, then MessageId descending within one (c-3 and b-2 share shard 2).
    assert stored == sorted(stored, key=lambda r: (r[0], r[1], [-ord(ch) for ch in r[2]]))
    assert [r[2] for r in stored if r[1] == 2] == ["c-3", "b-2"]
    assert {tuple(r) for r in stored} == {(1, abs(fingerprint(m)) % 4, m) for m in ids}
    # Acks name the whole key, the shard RECEIVE does not show included (read by name).
    await run(ack, alice, stored)
    assert await run(select, database, "SELECT MessageId FROM Orders") == []

    # The parent's row goes, its messages with it (ON DELETE CASCADE).
    await run(send, database, 1, "d-4", protos.Order(order_id="d-4"))
    await run(write, database, "delete", "Users", spanner.KeySet(keys=[[1]]))
    assert await run(select, database, "SELECT MessageId FROM Orders") == []

    # What Workers were not granted stays refused to Alice: sending (INSERT ON QUEUE).
    with pytest.raises(exceptions.PermissionDenied):
        await run(send, alice, 1, "e-5", protos.Order(order_id="e-5"))
