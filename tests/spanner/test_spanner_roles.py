"""Spanner's fine-grained access control for queues (issue 25, item 2) through Google's Python
client, against a real server and PostgreSQL: CREATE / DROP ROLE, GRANT / REVOKE on a queue,
on its RECEIVE_ / RENEWLEASE_ table functions and on tables, sessions made with a
``database_role`` (the session's creator_role), Spanner's PERMISSION_DENIED words, the roles
in ListDatabaseRoles and GetDatabaseDdl. A token bounding its role: test_spanner_authz.py."""

import asyncio
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from . import conftest
from google.cloud.spanner_v1 import KeySet

from spanq_server.store import Store

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = "roles-project", "roles-instance"
DDL = [
    "CREATE QUEUE OrdersQueue (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
    "CREATE TABLE Audit (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
    # Spanner's own example (fgac-queues): a producer, a consumer and an auditor.
    "CREATE ROLE queue_producer",
    "GRANT INSERT ON QUEUE OrdersQueue TO ROLE queue_producer",
    "CREATE ROLE queue_consumer",
    "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_OrdersQueue TO ROLE queue_consumer",
    "GRANT EXECUTE ON TABLE FUNCTION RENEWLEASE_OrdersQueue TO ROLE queue_consumer",
    "GRANT DELETE ON QUEUE OrdersQueue TO ROLE queue_consumer",
    "CREATE ROLE queue_reader",
    "GRANT SELECT ON QUEUE OrdersQueue TO ROLE queue_reader",
    "GRANT SELECT, INSERT ON TABLE Audit TO ROLE queue_reader",
]


def make_database(database_id: str, ddl: list[str]) -> Any:
    return conftest.make_database(PROJECT, INSTANCE, database_id, ddl)


def as_role(database: Any, role: str) -> Any:
    """The database as an application of that role opens it (sessions with creator_role)."""
    return spanner.Client(project=PROJECT).instance(INSTANCE).database(database.database_id, database_role=role)


def denied(fn: Any) -> str:
    with pytest.raises(exceptions.PermissionDenied) as failed:
        fn()
    return str(failed.value.message).split(", request_id = ")[0]  # (the client appends its request id)


def send(db: Any, key: int) -> None:
    with db.batch() as batch:
        batch.send(queue="OrdersQueue", key=[key], payload=f"order {key}")


def receive(db: Any) -> list[Any]:
    with db.snapshot() as snapshot:
        return list(snapshot.execute_sql(
            "SELECT Id, SpannerLeaseToken FROM RECEIVE_OrdersQueue(max_duration => '1s', max_batch_size => 10)"))


def select(db: Any) -> list[Any]:
    with db.snapshot() as snapshot:
        return list(snapshot.execute_sql("SELECT Id FROM OrdersQueue"))


def renew(db: Any, token: str) -> list[Any]:
    return list(db.run_in_transaction(lambda t: list(t.execute_sql(
        "SELECT SpannerNewLeaseToken FROM RENEWLEASE_OrdersQueue(lease_tokens => @t)", params={"t": [token]},
        param_types={"t": spanner.param_types.Array(spanner.param_types.STRING)}))))


def ack(db: Any, key: int) -> None:
    db.run_in_transaction(lambda t: t.ack(queue="OrdersQueue", key=[key]))


async def test_a_sessions_role_is_held_to_its_grants_in_spanners_words(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> dict[str, Any]:
        admin = make_database("orders", DDL)
        producer, consumer, reader = (as_role(admin, r) for r in ("queue_producer", "queue_consumer", "queue_reader"))
        out: dict[str, Any] = {}
        send(producer, 1)
        out["producer receives"] = denied(lambda: receive(producer))
        out["producer selects"] = denied(lambda: select(producer))
        out["producer acks"] = denied(lambda: ack(producer, 1))
        out["reader selects"] = [r[0] for r in select(reader)]
        out["reader receives"] = denied(lambda: receive(reader))
        got = receive(consumer)
        out["consumer received"] = [r[0] for r in got]
        out["consumer renewed"] = len(renew(consumer, got[0][1]))
        out["consumer sends"] = denied(lambda: send(consumer, 2))
        out["consumer selects"] = denied(lambda: select(consumer))
        ack(consumer, 1)
        # Tables: the reader may read and insert Audit rows, not delete them.
        reader.run_in_transaction(lambda t: t.insert("Audit", columns=("Id", "Note"), values=[(1, "seen")]))
        out["reader deletes"] = denied(lambda: reader.run_in_transaction(
            lambda t: t.delete("Audit", KeySet(keys=[[1]]))))

        def read(db: Any) -> list[Any]:
            with db.snapshot() as snapshot:
                return list(snapshot.read("Audit", ("Id",), KeySet(all_=True)))

        out["producer reads"] = denied(lambda: read(producer))
        # A session without a role has the whole database (Spanner: IAM's database-level access).
        out["no role selects"] = [r[0] for r in select(admin)]
        return out

    out = await asyncio.to_thread(scenario)
    assert out["producer receives"] == ("Role queue_producer does not have required privileges on table function "
                                        "RECEIVE_orders" "queue")
    assert out["producer selects"] == "Role queue_producer does not have required privileges on queue ordersqueue"
    assert out["producer acks"].startswith("mutation 0: Role queue_producer does not have required privileges on "
                                           "queue ordersqueue")
    assert out["reader selects"] == [1] and out["consumer received"] == [1] and out["consumer renewed"] == 1
    assert "Role queue_reader does not have required privileges on table function RECEIVE_ordersqueue" \
        == out["reader receives"]
    assert out["consumer sends"].endswith("Role queue_consumer does not have required privileges on queue ordersqueue")
    assert "on queue ordersqueue" in out["consumer selects"]
    assert out["reader deletes"].endswith("Role queue_reader does not have required privileges on table audit")
    assert "Role queue_producer does not have required privileges on table audit" in out["producer reads"]
    assert out["no role selects"] == []
    # The consumer's ack went through; the reader's row is there.
    assert sql.execute("SELECT id, note FROM d1_audit").fetchall() == [(1, "seen")]


async def test_roles_are_listed_revoked_dropped_and_an_unknown_role_is_refused(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> dict[str, Any]:
        admin = make_database("listed", DDL)
        out: dict[str, Any] = {"roles": [r.name.rsplit("/", 1)[1] for r in admin.list_database_roles()]}
        admin.reload()
        out["ddl"] = [s for s in admin.ddl_statements if "ROLE" in s]
        producer = as_role(admin, "queue_producer")
        send(producer, 1)
        admin.update_ddl(["REVOKE INSERT ON QUEUE OrdersQueue FROM ROLE queue_producer"]).result(timeout=30)
        out["revoked"] = denied(lambda: send(producer, 2))
        # What public has, every role has.
        admin.update_ddl(["GRANT INSERT ON QUEUE OrdersQueue TO ROLE public"]).result(timeout=30)
        send(producer, 3)
        admin.update_ddl(["REVOKE INSERT ON QUEUE OrdersQueue FROM ROLE public"]).result(timeout=30)
        with pytest.raises(exceptions.FailedPrecondition, match="holds privileges; REVOKE them before DROP ROLE"):
            admin.update_ddl(["DROP ROLE queue_consumer"]).result(timeout=30)
        admin.update_ddl(["DROP ROLE queue_producer"]).result(timeout=30)
        out["dropped"] = denied(lambda: send(producer, 4))
        out["unknown"] = denied(lambda: send(as_role(admin, "nobody"), 5))
        for statement, error in [("CREATE ROLE queue_reader", exceptions.AlreadyExists),
                                 ("GRANT SELECT ON QUEUE Nope TO ROLE queue_reader", exceptions.NotFound),
                                 ("GRANT SELECT ON QUEUE OrdersQueue TO ROLE nobody", exceptions.NotFound),
                                 ("GRANT UPDATE ON QUEUE OrdersQueue TO ROLE queue_reader", exceptions.InvalidArgument),
                                 ("GRANT SELECT(Id) ON TABLE Audit TO ROLE queue_reader", exceptions.InvalidArgument),
                                 ("GRANT ROLE public TO ROLE queue_consumer", exceptions.InvalidArgument),
                                 ("CREATE ROLE spanner_info_reader", exceptions.InvalidArgument)]:
            with pytest.raises(error):
                admin.update_ddl([statement]).result(timeout=30)
        # Dropping a queue revokes what was granted on it: one made again starts with nothing.
        admin.update_ddl(["DROP QUEUE OrdersQueue", DDL[0]]).result(timeout=30)
        admin.reload()
        out["after drop"] = [s for s in admin.ddl_statements if s.startswith("GRANT")]
        return out

    out = await asyncio.to_thread(scenario)
    assert out["roles"] == ["public", "spanner_info_reader", "spanner_sys_reader", "queue_producer", "queue_consumer",
                            "queue_reader"]
    assert out["ddl"] == [
        "CREATE ROLE queue_producer", "CREATE ROLE queue_consumer", "CREATE ROLE queue_reader",
        "GRANT INSERT ON QUEUE OrdersQueue TO ROLE queue_producer",
        "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_OrdersQueue TO ROLE queue_consumer",
        "GRANT EXECUTE ON TABLE FUNCTION RENEWLEASE_OrdersQueue TO ROLE queue_consumer",
        "GRANT DELETE ON QUEUE OrdersQueue TO ROLE queue_consumer",
        "GRANT SELECT ON QUEUE OrdersQueue TO ROLE queue_reader",
        "GRANT INSERT, SELECT ON TABLE Audit TO ROLE queue_reader",
    ]
    assert "Role queue_producer does not have required privileges on queue ordersqueue" in out["revoked"]
    assert (out["dropped"], out["unknown"]) == ("Role not found: queue_producer", "Role not found: nobody")
    assert out["after drop"] == ["GRANT INSERT, SELECT ON TABLE Audit TO ROLE queue_reader"]


async def test_a_role_inherits_the_roles_granted_to_it_transitively_until_revoked(spanner_env) -> None:  # type: ignore[no-untyped-def]
    inheritance = DDL + [
        "CREATE ROLE ops", "GRANT ROLE queue_consumer TO ROLE ops",
        "CREATE ROLE oncall", "GRANT ROLE ops, spanner_info_reader TO ROLE oncall",
        "CREATE ROLE unused", "GRANT ROLE unused TO ROLE oncall",
    ]

    def scenario() -> dict[str, Any]:
        admin = make_database("inherits", inheritance)
        send(admin, 1)
        oncall = as_role(admin, "oncall")
        out: dict[str, Any] = {"oncall receives": [r[0] for r in receive(oncall)]}  # queue_consumer's, through ops
        out["oncall selects"] = denied(lambda: select(oncall))
        admin.update_ddl(["GRANT ROLE queue_reader TO ROLE ops"]).result(timeout=30)
        out["then selects"] = [r[0] for r in select(oncall)]
        admin.reload()
        out["ddl"] = [s for s in admin.ddl_statements if "ROLE" in s]
        # The listed DDL makes the same roles again.
        copy = make_database("inherits-copy", list(admin.ddl_statements))
        copy.reload()
        out["copied"] = [s for s in copy.ddl_statements if "ROLE" in s]
        for statement in ["GRANT ROLE oncall TO ROLE queue_consumer", "GRANT ROLE ops TO ROLE ops"]:
            with pytest.raises(exceptions.FailedPrecondition, match="would make a cycle"):
                admin.update_ddl([statement]).result(timeout=30)
        with pytest.raises(exceptions.NotFound, match="Role not found: nobody"):
            admin.update_ddl(["GRANT ROLE nobody TO ROLE ops"]).result(timeout=30)
        with pytest.raises(exceptions.FailedPrecondition, match="unused is granted to role oncall"):
            admin.update_ddl(["DROP ROLE unused"]).result(timeout=30)
        admin.update_ddl(["REVOKE ROLE ops FROM ROLE oncall"]).result(timeout=30)
        out["revoked receives"] = denied(lambda: receive(oncall))
        out["revoked selects"] = denied(lambda: select(oncall))
        admin.update_ddl(["REVOKE ROLE unused FROM ROLE oncall", "DROP ROLE unused"]).result(timeout=30)
        out["roles"] = [r.name.rsplit("/", 1)[1] for r in admin.list_database_roles()]
        return out

    out = await asyncio.to_thread(scenario)
    assert out["oncall receives"] == [1]
    assert out["oncall selects"] == "Role oncall does not have required privileges on queue ordersqueue"
    assert out["then selects"] == [1]
    assert out["ddl"][:11] == [
        "CREATE ROLE queue_producer", "CREATE ROLE queue_consumer", "CREATE ROLE queue_reader", "CREATE ROLE ops",
        "CREATE ROLE oncall", "CREATE ROLE unused",
        "GRANT ROLE queue_consumer TO ROLE ops", "GRANT ROLE queue_reader TO ROLE ops",
        "GRANT ROLE ops TO ROLE oncall", "GRANT ROLE spanner_info_reader TO ROLE oncall",
        "GRANT ROLE unused TO ROLE oncall"]
    assert not [s for s in out["ddl"][11:] if s.startswith("GRANT ROLE")] and out["copied"] == out["ddl"]
    assert out["revoked receives"] == ("Role oncall does not have required privileges on table function "
                                       "RECEIVE_ordersqueue")
    assert out["revoked selects"] == "Role oncall does not have required privileges on queue ordersqueue"
    assert "unused" not in out["roles"] and "oncall" in out["roles"]


async def test_migration_0015_adds_the_roles_of_databases_made_before_it(spanner_env, sql, database_url) -> None:  # type: ignore[no-untyped-def]
    made = await asyncio.to_thread(make_database, "older", DDL[:2])
    # The schema as before migration 0015.
    sql.execute("DROP TABLE spanq.spanner_roles")
    sql.execute("ALTER TABLE spanq.queues DROP COLUMN parent_cascade")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 15")
    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [15]
    assert sql.execute("SELECT count(*) FROM spanq.spanner_roles").fetchone() == (0,)
    # The queues made before it cascade, as they were made.
    assert sql.execute("SELECT parent_cascade FROM spanq.queues WHERE name LIKE 'd%ordersqueue'").fetchone() == (True,)

    def scenario() -> list[str]:
        made.update_ddl(DDL[2:4]).result(timeout=30)
        send(as_role(made, "queue_producer"), 1)
        return [r.name.rsplit("/", 1)[1] for r in made.list_database_roles()]

    assert (await asyncio.to_thread(scenario))[-1] == "queue_producer"
