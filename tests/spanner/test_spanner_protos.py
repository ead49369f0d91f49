"""Proto bundles and proto payloads through Google's Python client, against a real server and
PostgreSQL: CREATE / ALTER / DROP PROTO BUNDLE with the request's proto_descriptors, kept per
database and given back by GetDatabaseDdl; a queue whose Payload is a message of the bundle,
sent as the message's bytes, received as the message (column_info) or as bytes, acked, and
seen as a BYTES queue by spanq.v1; and what is refused, with nothing stored."""

import base64
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import TypeCode
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from spanq_proto.v1 import queue_pb2

from .. import helpers
from .conftest import run

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = "proto-project", "proto-instance"
Field = descriptor_pb2.FieldDescriptorProto
BUNDLE = "CREATE PROTO BUNDLE (examples.shipping.Order, `examples.shipping.Status`)"
ORDERS = "CREATE QUEUE Orders (Id INT64 NOT NULL, Payload examples.shipping.Order NOT NULL) PRIMARY KEY (Id)"
LISTED_QUEUE = ("CREATE QUEUE Orders (\n  Id INT64 NOT NULL,\n  Payload examples.shipping.Order NOT NULL\n"
                ") PRIMARY KEY (Id)")


def shipping(version: int = 1) -> descriptor_pb2.FileDescriptorSet:
    """examples/shipping.proto, built by hand: message Order, enum Status and (version 2) message
    Shipment and a field more in Order."""
    file = descriptor_pb2.FileDescriptorProto(name="examples/shipping.proto", package="examples.shipping",
                                              syntax="proto3")
    order = file.message_type.add(name="Order")
    order.field.add(name="order_id", number=1, type=Field.TYPE_STRING, label=Field.LABEL_OPTIONAL)
    order.field.add(name="quantity", number=2, type=Field.TYPE_INT64, label=Field.LABEL_OPTIONAL)
    status = file.enum_type.add(name="Status")
    status.value.add(name="STATUS_UNSPECIFIED", number=0)
    status.value.add(name="SHIPPED", number=1)
    if version > 1:
        order.field.add(name="note", number=3, type=Field.TYPE_STRING, label=Field.LABEL_OPTIONAL)
        shipment = file.message_type.add(name="Shipment")
        shipment.field.add(name="carrier", number=1, type=Field.TYPE_STRING, label=Field.LABEL_OPTIONAL)
    return descriptor_pb2.FileDescriptorSet(file=[file])


def order_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(shipping().file[0])
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("examples.shipping.Order"))


Order = order_class()
DESCRIPTORS = shipping().SerializeToString()
NOT_AN_ORDER = b"\xff\xff\xff"  # an unterminated varint: no message parses from it


def make_database(database_id: str, ddl: list[str] | None = None, descriptors: bytes | None = None) -> Any:
    instance = spanner.Client(project=PROJECT).instance(INSTANCE)
    if not instance.exists():
        instance.create().result(timeout=30)
    database = instance.database(database_id, ddl_statements=ddl or [], proto_descriptors=descriptors)
    database.create().result(timeout=30)
    return database


def update_ddl(database: Any, statements: list[str], descriptors: bytes | None = None) -> None:
    database.update_ddl(statements, proto_descriptors=descriptors).result(timeout=30)


def refused(database: Any, statements: list[str], descriptors: bytes | None = None) -> str:
    with pytest.raises(exceptions.GoogleAPICallError) as failed:
        update_ddl(database, statements, descriptors)
    return f"{type(failed.value).__name__}: {failed.value.message}"


def ddl_of(database: Any) -> tuple[list[str], bytes]:
    database.reload()
    return list(database.ddl_statements), bytes(database.proto_descriptors or b"")


def receive(database: Any, column_info: dict[str, Any] | None = None) -> tuple[list[Any], list[Any]]:
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql("SELECT Id, Payload FROM RECEIVE_Orders(max_duration => '1s')",
                                       column_info=column_info)
        rows = sorted(list(results), key=lambda r: r[0])
        return list(results.fields), rows


def send(database: Any, key: int, payload: Any) -> None:
    with database.batch() as batch:
        batch.send(queue="Orders", key=[key], payload=payload)


def ack(database: Any, *keys: int) -> None:
    with database.batch() as batch:
        for key in keys:
            batch.ack(queue="Orders", key=[key])


async def test_a_queue_of_proto_payloads_sends_receives_as_the_message_or_bytes_and_acks(
        spanner_env, stub, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "shipping")
    await run(update_ddl, database, [BUNDLE, ORDERS], DESCRIPTORS)
    statements, descriptors = await run(ddl_of, database)
    assert statements == [
        "CREATE PROTO BUNDLE (\n  examples.shipping.Order,\n  examples.shipping.Status,\n)", LISTED_QUEUE]
    assert descriptors == DESCRIPTORS

    first, second = Order(order_id="A-1", quantity=3), Order(order_id="A-2")
    await run(send, database, 1, first)  # the client encodes a message as its bytes, base64
    await run(send, database, 2, base64.b64encode(second.SerializeToString()))
    fields, rows = await run(receive, database, {"Payload": Order()})
    payload = fields[1].type_
    assert (payload.code, payload.proto_type_fqn) == (TypeCode.PROTO, "examples.shipping.Order")
    assert [(r[0], r[1]) for r in rows] == [(1, first), (2, second)]
    await run(ack, database, 1, 2)
    assert sql.execute("SELECT count(*) FROM d1_orders").fetchone() == (0,)

    third = Order(order_id="A-3", quantity=1)
    await run(send, database, 3, third)
    _, rows = await run(receive, database)  # no column_info: the message's bytes
    assert [(r[0], r[1]) for r in rows] == [(3, third.SerializeToString())]
    await run(ack, database, 3)

    # INSERT with the message as a PROTO parameter; THEN RETURN and a Read type Payload PROTO too.
    def insert() -> list[Any]:
        return list(database.run_in_transaction(lambda t: list(t.execute_sql(
            "INSERT INTO Orders (Id, Payload) VALUES (5, @order) THEN RETURN Id, Payload",
            params={"order": Order(order_id="A-5")}, param_types={"order": spanner.param_types.ProtoMessage(Order())},
            column_info={"Payload": Order()}))))

    def read() -> list[Any]:
        with database.snapshot() as snapshot:
            return list(snapshot.read("Orders", ["Id", "Payload"], spanner.KeySet(all_=True),
                                      column_info={"Payload": Order()}))

    def joined() -> list[Any]:  # the table subset reads the queue too (a join): PROTO there as well
        with database.snapshot() as snapshot:
            results = snapshot.execute_sql("SELECT o.Id, o.Payload, p.Id FROM Orders AS o JOIN Orders AS p "
                                           "ON p.Id = o.Id", column_info={"Payload": Order()})
            return list(results)

    assert await run(insert) == [[5, Order(order_id="A-5")]]
    assert await run(read) == [[5, Order(order_id="A-5")]]
    assert await run(joined) == [[5, Order(order_id="A-5"), 5]]
    assert [r[0] for r in (await run(receive, database))[1]] == [5]
    await run(ack, database, 5)

    # spanq.v1, psql and the SDK see a BYTES queue of the messages' bytes.
    queue = await stub.GetQueue(queue_pb2.GetQueueRequest(name="d1_orders"))
    assert queue.payload_type == queue_pb2.BYTES
    fourth = Order(order_id="A-4")
    await run(send, database, 4, fourth)
    got = await helpers.receive_some(stub, "d1_orders", 1)
    assert [base64.b64decode(m.payload.string_value) for m in got] == [fourth.SerializeToString()]
    assert sql.execute("SELECT payload FROM d1_orders").fetchone() == (fourth.SerializeToString(),)


async def test_bundle_statements_and_payloads_spanner_refuses_store_nothing(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "refusals")

    def bundles() -> int:
        return int(sql.execute("SELECT count(*) FROM spanq.spanner_proto_bundles").fetchone()[0])

    cases = [
        ([BUNDLE], None, "InvalidArgument: CREATE PROTO BUNDLE needs proto descriptors"),
        (["CREATE PROTO BUNDLE (examples.shipping.Nope)"], DESCRIPTORS,
         "InvalidArgument: CREATE PROTO BUNDLE: proto type examples.shipping.Nope is not in the proto descriptors"),
        (["CREATE PROTO BUNDLE (Examples.Shipping.Order)"], DESCRIPTORS, "Examples.Shipping.Order is not in"),
        ([BUNDLE], b"\xff not descriptors", "InvalidArgument: the proto descriptors do not parse"),
        ([ORDERS], None, "InvalidArgument: CREATE QUEUE orders: Type not found: examples.shipping.Order"),
        (["ALTER PROTO BUNDLE DELETE (examples.shipping.Order)"], None,
         "FailedPrecondition: ALTER PROTO BUNDLE: the database has no proto bundle"),
        (["DROP PROTO BUNDLE"], None, "FailedPrecondition: DROP PROTO BUNDLE: the database has no proto bundle"),
    ]
    for statements, descriptors, words in cases:
        assert words in await run(refused, database, statements, descriptors), statements
    # A database name no CreateDatabase made reaches the default namespace, which has no bundle.
    nowhere = spanner.Client(project=PROJECT).instance(INSTANCE).database("nowhere")
    assert "FailedPrecondition: proto bundles belong to a database made by CreateDatabase" in await run(
        refused, nowhere, [BUNDLE], DESCRIPTORS)
    assert bundles() == 0
    # The bundle's statement fails after a good one: the batch stops there, the first stays.
    assert "statement 1" in await run(refused, database, [BUNDLE, "CREATE PROTO BUNDLE (examples.shipping.Order)"],
                                      DESCRIPTORS)
    assert bundles() == 1
    queue_cases = {
        "CREATE QUEUE K (Id examples.shipping.Order NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)":
            "a proto type is for Payload",
        "CREATE QUEUE E (Id INT64 NOT NULL, Payload examples.shipping.Status NOT NULL) PRIMARY KEY (Id)":
            "examples.shipping.Status is a proto enum",
        "CREATE QUEUE S (Id INT64 NOT NULL, Payload examples.shipping.Shipment NOT NULL) PRIMARY KEY (Id)":
            "Type not found: examples.shipping.Shipment",
    }
    for statement, words in queue_cases.items():
        assert words in await run(refused, database, [statement]), statement
    await run(update_ddl, database, [ORDERS])
    assert "FailedPrecondition: CREATE PROTO BUNDLE: the database has a proto bundle" in await run(
        refused, database, [BUNDLE], DESCRIPTORS)
    in_use = "proto type examples.shipping.Order is used by queue Orders"
    assert in_use in await run(refused, database, ["ALTER PROTO BUNDLE DELETE (examples.shipping.Order)"])
    assert in_use in await run(refused, database, ["DROP PROTO BUNDLE"])
    # Descriptors that no longer hold a type of the bundle (one a queue uses) are refused too.
    other = descriptor_pb2.FileDescriptorSet(file=[descriptor_pb2.FileDescriptorProto(
        name="other.proto", package="examples.shipping", enum_type=[shipping().file[0].enum_type[0]])])
    assert "proto type examples.shipping.Order is not in the proto descriptors given" in await run(
        refused, database, ["ALTER PROTO BUNDLE UPDATE (examples.shipping.Status)"], other.SerializeToString())
    assert (await run(ddl_of, database))[1] == DESCRIPTORS

    # A payload that is no Order: INVALID_ARGUMENT naming the queue and the type, nothing sent.
    with pytest.raises(exceptions.InvalidArgument, match="queue 'Orders' is not a valid examples.shipping.Order"):
        await run(send, database, 1, base64.b64encode(NOT_AN_ORDER))

    def insert() -> None:
        database.run_in_transaction(lambda t: t.execute_update(
            "INSERT INTO Orders (Id, Payload) VALUES (2, @p)", params={"p": base64.b64encode(NOT_AN_ORDER)},
            param_types={"p": spanner.param_types.BYTES}))

    with pytest.raises(exceptions.InvalidArgument, match="examples.shipping.Order"):
        await run(insert)
    assert sql.execute("SELECT count(*) FROM d1_orders").fetchone() == (0,)

    def receive_where() -> None:  # Spanner defines no comparison of PROTO values
        with database.snapshot() as snapshot:
            list(snapshot.execute_sql("SELECT Id FROM RECEIVE_Orders(max_duration => '1s') WHERE Payload = b''"))

    with pytest.raises(exceptions.InvalidArgument, match=r"Payload \(PROTO\) cannot be compared"):
        await run(receive_where)


async def test_alter_and_drop_proto_bundle_and_create_database_with_one(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "altered", [BUNDLE, ORDERS], DESCRIPTORS)
    assert (await run(ddl_of, database))[0][0].startswith("CREATE PROTO BUNDLE (\n  examples.shipping.Order,")
    v2 = shipping(2).SerializeToString()
    await run(update_ddl, database, ["ALTER PROTO BUNDLE INSERT (examples.shipping.Shipment) "
                                     "UPDATE (examples.shipping.Order) DELETE (examples.shipping.Status)"], v2)
    statements, descriptors = await run(ddl_of, database)
    assert statements[0] == "CREATE PROTO BUNDLE (\n  examples.shipping.Order,\n  examples.shipping.Shipment,\n)"
    assert descriptors == v2
    # The new field of Order is the bundle's now; a payload of the new version parses.
    pool = descriptor_pool.DescriptorPool()
    pool.Add(shipping(2).file[0])
    order_v2 = message_factory.GetMessageClass(pool.FindMessageTypeByName("examples.shipping.Order"))
    await run(send, database, 1, order_v2(order_id="B-1", note="fragile"))
    _, rows = await run(receive, database, {"Payload": order_v2()})
    assert rows[0][1].note == "fragile"

    for statement, words in {
        "ALTER PROTO BUNDLE INSERT (examples.shipping.Shipment)": "examples.shipping.Shipment is already in",
        "ALTER PROTO BUNDLE UPDATE (examples.shipping.Status)": "examples.shipping.Status is not in the proto bundle",
        "ALTER PROTO BUNDLE": "expected INSERT (...), UPDATE (...) or DELETE (...)",
    }.items():
        assert words in await run(refused, database, [statement], v2), statement
    # DELETE alone needs no descriptors: the bundle's are kept.
    await run(update_ddl, database, ["ALTER PROTO BUNDLE DELETE (examples.shipping.Shipment)"])
    assert (await run(ddl_of, database)) == (
        ["CREATE PROTO BUNDLE (\n  examples.shipping.Order,\n)", LISTED_QUEUE], v2)
    await run(update_ddl, database, ["DROP QUEUE Orders", "DROP PROTO BUNDLE"])
    assert await run(ddl_of, database) == ([], b"")
    assert sql.execute("SELECT count(*) FROM spanq.spanner_proto_bundles").fetchone() == (0,)
    # A failed CreateDatabase leaves no bundle behind.
    with pytest.raises(exceptions.GoogleAPICallError, match="Type not found"):
        await run(make_database, "failed", [BUNDLE, ORDERS.replace("Order NOT", "Shipment NOT")], DESCRIPTORS)
    assert sql.execute("SELECT count(*) FROM spanq.spanner_proto_bundles").fetchone() == (0,)


async def test_proto_and_enum_columns_of_tables(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

    table = ("CREATE TABLE Shipments (Id INT64 NOT NULL, Status examples.shipping.Status, "
             "Item examples.shipping.Order, Items ARRAY<examples.shipping.Order>) PRIMARY KEY (Id)")
    database = await run(make_database, "tables", [BUNDLE, table], DESCRIPTORS)
    statements, _ = await run(ddl_of, database)
    assert statements[1] == ("CREATE TABLE Shipments (\n  Id INT64 NOT NULL,\n  Status examples.shipping.Status,\n"
                             "  Item examples.shipping.Order,\n  Items ARRAY<examples.shipping.Order>,\n"
                             ") PRIMARY KEY(Id)")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(shipping().file[0])
    status = EnumTypeWrapper(pool.FindEnumTypeByName("examples.shipping.Status"))

    def write() -> None:
        with database.batch() as batch:
            batch.insert("Shipments", ["Id", "Status", "Item", "Items"],
                         [[1, 1, Order(order_id="S-1"), [Order(order_id="x"), Order(order_id="y")]], [2, 0, None, []]])

    def query() -> tuple[list[Any], list[Any]]:
        with database.snapshot() as snapshot:
            results = snapshot.execute_sql(
                "SELECT Id, Status, Item, Items FROM Shipments WHERE Status = @s", params={"s": 1},
                param_types={"s": spanner.param_types.ProtoEnum(status)},
                column_info={"Status": status, "Item": Order(), "Items": Order()})
            rows = list(results)
            return list(results.fields), rows

    await run(write)
    fields, rows = await run(query)
    assert [(f.type_.code, f.type_.proto_type_fqn) for f in fields[1:3]] == [
        (TypeCode.ENUM, "examples.shipping.Status"), (TypeCode.PROTO, "examples.shipping.Order")]
    assert fields[3].type_.array_element_type.proto_type_fqn == "examples.shipping.Order"
    assert rows == [[1, "SHIPPED", Order(order_id="S-1"), [Order(order_id="x"), Order(order_id="y")]]]
    # psql sees the message's bytes and the enum's number.
    assert sql.execute("SELECT status, item FROM d1_shipments WHERE id = 1").fetchone() == (
        1, Order(order_id="S-1").SerializeToString())
    assert "used by column Shipments.Status" in await run(
        refused, database, ["ALTER PROTO BUNDLE DELETE (`examples.shipping.Status`)"])
    # New descriptors for the types the table uses: still a message, still an enum.
    await run(update_ddl, database, ["ALTER PROTO BUNDLE UPDATE (examples.shipping.Status, examples.shipping.Order)"],
              shipping(2).SerializeToString())
    for statement, words in {
        "CREATE TABLE K (Id examples.shipping.Order NOT NULL) PRIMARY KEY (Id)": "Spanner keys take no PROTO",
        "CREATE TABLE N (Id INT64 NOT NULL, X examples.shipping.Nope) PRIMARY KEY (Id)":
            "CREATE TABLE N: column X: Type not found: examples.shipping.Nope",
        "ALTER TABLE Shipments ADD COLUMN Other examples.shipping.Other": "Type not found: examples.shipping.Other",
        "CREATE INDEX ByItem ON Shipments (Item)": "no index key takes",
    }.items():
        assert words in await run(refused, database, [statement]), statement
    await run(update_ddl, database, ["ALTER TABLE Shipments ADD COLUMN Again examples.shipping.Order"])

    def compare() -> None:
        with database.snapshot() as snapshot:
            list(snapshot.execute_sql("SELECT Id FROM Shipments WHERE Item = @o", params={"o": Order()},
                                      param_types={"o": spanner.param_types.ProtoMessage(Order())}))

    with pytest.raises(exceptions.InvalidArgument, match="do not compare"):
        await run(compare)

    # Values that are no Order, no Status: refused, nothing written.
    def bad(columns: list[str], row: list[Any]) -> None:
        with database.batch() as batch:
            batch.insert("Shipments", ["Id", *columns], [[9, *row]])

    with pytest.raises(exceptions.InvalidArgument, match="7 is no value of the enum examples.shipping.Status"):
        await run(bad, ["Status"], [7])
    with pytest.raises(exceptions.InvalidArgument, match=r"Items'\[1\] is not a valid examples.shipping.Order"):
        await run(bad, ["Items"], [[Order(), base64.b64encode(NOT_AN_ORDER)]])

    def update() -> None:
        database.run_in_transaction(lambda t: t.execute_update(
            "UPDATE Shipments SET Item = @o WHERE Id = 1", params={"o": base64.b64encode(NOT_AN_ORDER)},
            param_types={"o": spanner.param_types.ProtoMessage(Order())}))

    with pytest.raises(exceptions.InvalidArgument, match="parameter @o is not a valid examples.shipping.Order"):
        await run(update)
    assert sql.execute("SELECT count(*) FROM d1_shipments WHERE id = 9").fetchone() == (0,)
    assert sql.execute("SELECT item FROM d1_shipments WHERE id = 1").fetchone() == (
        Order(order_id="S-1").SerializeToString(),)
