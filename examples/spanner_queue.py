"""Spanner queue code, unchanged, against spanq: the official google-cloud-spanner
client pointed at spanq through SPANNER_EMULATOR_HOST.

    make run                                   # spanq on localhost:50051
    SPANNER_EMULATOR_HOST=localhost:50051 python examples/spanner_queue.py

It creates an instance and a database with a queue (any names do: they all
reach spanq's one PostgreSQL database), sends three messages (one scheduled a
second ahead) with Mutation.Send, receives them with the RECEIVE table
function as a long-running streaming query, renews one lease, and acknowledges
each with DELETE ... ASSERT_ROWS_MODIFIED 1 in a read-write transaction: the
exactly-once pattern of Spanner's docs. Safe to run again.
"""

import base64
import os
import uuid
from datetime import datetime, timedelta, timezone

from google.cloud import spanner

PROJECT, INSTANCE, DATABASE = "demo-project", "demo-instance", "demo-db"
QUEUE_DDL = """
CREATE QUEUE IF NOT EXISTS OrderEvents (
  CustomerId INT64 NOT NULL,
  EventId    STRING(36) NOT NULL,
  Payload    BYTES(MAX) NOT NULL,
) PRIMARY KEY (CustomerId, EventId)
"""


def database_handle() -> spanner.Client:
    os.environ.setdefault("SPANNER_EMULATOR_HOST", "localhost:50051")
    client = spanner.Client(project=PROJECT)
    instance = client.instance(INSTANCE, configuration_name=f"projects/{PROJECT}/instanceConfigs/emulator-config",
                               display_name="demo", node_count=1)
    if not instance.exists():
        instance.create().result(timeout=30)
    database = instance.database(DATABASE)
    if not database.exists():
        database = instance.database(DATABASE, ddl_statements=[QUEUE_DDL])
        database.create().result(timeout=30)
    else:
        database.update_ddl([QUEUE_DDL]).result(timeout=30)
    return database


def send(database, customer: int) -> list[str]:  # type: ignore[no-untyped-def]
    ids = [str(uuid.uuid4()) for _ in range(3)]
    soon = datetime.now(timezone.utc) + timedelta(seconds=1)
    with database.batch() as batch:  # one single-use Commit with three Send mutations
        batch.send(queue="OrderEvents", key=[customer, ids[0]], payload=base64.b64encode(b"order placed"))
        batch.send(queue="OrderEvents", key=[customer, ids[1]], payload=base64.b64encode(b"order paid"))
        batch.send(queue="OrderEvents", key=[customer, ids[2]], payload=base64.b64encode(b"reminder"),
                   deliver_time=soon)
    return ids


def work(database, expected: set[str]) -> int:  # type: ignore[no-untyped-def]
    received = 0
    with database.snapshot() as snapshot:  # RECEIVE needs a strong, single-use read
        rows = snapshot.execute_sql(
            "SELECT * FROM RECEIVE_OrderEvents(max_duration => '3s', max_batch_size => 10)")
        for customer, event_id, payload, deliver_time, lease_expiry, lease_token, last in rows:
            if event_id not in expected:
                continue  # left over from an earlier run: its lease lapses, it comes back later
            received += 1
            print(f"got {event_id[:8]} {base64.b64decode(payload).decode()!r} lease until {lease_expiry:%H:%M:%S}")
            if received == 1:  # a slow job renews its lease (each renewal returns a new token)
                [[old, new, until]] = database.run_in_transaction(
                    lambda t: list(t.execute_sql("SELECT * FROM RENEWLEASE_OrderEvents(lease_tokens => @tokens)",
                                                 params={"tokens": [lease_token]},
                                                 param_types={"tokens": spanner.param_types.Array(
                                                     spanner.param_types.STRING)})))
                print(f"  renewed its lease until {until:%H:%M:%S}")

            def process(transaction, customer=customer, event_id=event_id):  # type: ignore[no-untyped-def]
                # Business writes would go here; the ack commits with them or not at all.
                transaction.execute_update(
                    "DELETE FROM OrderEvents WHERE CustomerId = @c AND EventId = @e ASSERT_ROWS_MODIFIED 1",
                    params={"c": customer, "e": event_id},
                    param_types={"c": spanner.param_types.INT64, "e": spanner.param_types.STRING})

            database.run_in_transaction(process)
            print(f"  acked {event_id[:8]}")
    return received


def main() -> None:
    database = database_handle()
    ids = send(database, customer=42)
    print(f"sent {len(ids)} message(s)")
    print(f"received {work(database, set(ids))} message(s)")


if __name__ == "__main__":
    main()
