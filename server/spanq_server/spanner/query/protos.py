"""Spanner's proto bundles: the protocol buffer types a database's columns may take.

The grammar (GoogleSQL DDL of UpdateDatabaseDdl and CreateDatabase), read on the one
parser's cursor (``parser.Parser``), as roles.py reads its own:

    CREATE PROTO BUNDLE (pkg.Msg, pkg.Enum, ...)
    ALTER PROTO BUNDLE [INSERT (types)] [UPDATE (types)] [DELETE (types)]
    DROP PROTO BUNDLE

A type is its full name, dotted, each part or the whole in backticks or not
(```pkg.Msg```, ``pkg.`Msg```); names are case-sensitive, as protobuf's are.

A database has at most one bundle: its types and the descriptors they came with (the
request's ``proto_descriptors``, a serialized google.protobuf.FileDescriptorSet, kept as
given: GetDatabaseDdl returns them). Every type of a bundle is a message or an enum of
its descriptors; a queue's Payload may be one of its messages (``CREATE QUEUE q (...,
Payload examples.shipping.Order NOT NULL)``), stored as spanq's BYTES payload and
typed PROTO in results, and a payload written to it must parse as that message
(``check``). A table's column may be of a message type (PROTO, stored as bytea) or an
enum type (ENUM, stored as its number, bigint) of the bundle (``resolve``), its values
checked alike (``check_typed``). A type a column uses cannot leave the bundle.
"""

import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from ...domain.records import Records
from ...ground import errors
from ...ground.errors import InvalidArgument
from .ast import ProtoBundle, SpannerType
from .lexing import Token

MAX_DESCRIPTORS_BYTES = 5 * 1024 * 1024
"""Spanner's limit on a proto bundle's descriptors (5 MiB)."""
CACHE_SECONDS = 1.0
"""How long a server keeps a database's bundle: a change through it applies at once, through
another server within this."""
MAX_CACHED = 256
"""Bundles kept at most (the oldest read goes first)."""


def is_bundle_ddl(tokens: list[Token]) -> bool:
    """Whether a DDL statement's first words are CREATE, ALTER or DROP PROTO BUNDLE."""
    first, second = tokens[0], tokens[min(1, len(tokens) - 1)]
    return first.is_word("create", "alter", "drop") and second.is_word("proto")


def statement(p: Any) -> ProtoBundle:
    """CREATE / ALTER / DROP PROTO BUNDLE, after the parser's checks of the dialect."""
    action = p.word("create", "alter", "drop")
    p.word("proto")
    p.word("bundle")
    if action == "drop":
        p.end()
        return ProtoBundle("drop")
    if action == "create":
        types = type_list(p)
        p.end()
        return ProtoBundle("create", insert=types)
    lists: dict[str, tuple[str, ...]] = {}
    while p.peek.is_word("insert", "update", "delete"):
        clause = p.word("insert", "update", "delete")
        if clause in lists:
            raise InvalidArgument(f"ALTER PROTO BUNDLE: {clause.upper()} is given twice")
        lists[clause] = type_list(p)
    if not lists:
        raise p.error("INSERT (...), UPDATE (...) or DELETE (...)")
    p.end()
    return ProtoBundle("alter", lists.get("insert", ()), lists.get("update", ()), lists.get("delete", ()))


def type_list(p: Any) -> tuple[str, ...]:
    """( type [, ...] [,] ): the full names, each once, in the order written."""
    p.punct("(")
    found = [type_name(p)]
    while p.accept_punct(","):
        if p.at_punct(")"):  # a trailing comma, as GetDatabaseDdl writes the list
            break
        found.append(type_name(p))
    p.punct(")")
    return tuple(dict.fromkeys(found))


def type_name(p: Any) -> str:
    """A proto type's full name: parts joined by ``.``, as written, without backticks."""
    if p.peek.kind != "ident":
        raise p.error("a proto type's full name (package.Message)")
    parts = [p.next().spelled]
    while p.at_punct(".") and p.ahead().kind == "ident":
        p.next()
        parts.append(p.next().spelled)
    return ".".join(parts)


# -- a database's bundle -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bundle:
    """A database's bundle: its types (in the order bundled) and its descriptors, as given."""

    types: tuple[str, ...]
    descriptors: bytes
    pool: Any = dataclasses.field(compare=False, repr=False)
    """The descriptors' google.protobuf DescriptorPool."""

    def kind(self, name: str) -> str | None:
        """"message" or "enum" for a type of the descriptors, else None."""
        return kind_of(self.pool, name)

    def message(self, name: str) -> type[Message]:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(name))  # type: ignore[no-any-return]

    def ddl(self) -> str:
        """Its statement in GetDatabaseDdl: one type a line, each followed by a comma."""
        return "CREATE PROTO BUNDLE (\n" + "".join(f"  {name},\n" for name in self.types) + ")"


def kind_of(pool: Any, name: str) -> str | None:
    try:
        pool.FindMessageTypeByName(name)
        return "message"
    except KeyError:
        pass
    try:
        pool.FindEnumTypeByName(name)
        return "enum"
    except KeyError:
        return None


_POOLS: dict[bytes, Any] = {}
"""Descriptor pools by their descriptors' digest: one per bundle in use, however many reads."""


def pool_of(descriptors: bytes) -> Any:
    """The descriptors' pool; INVALID_ARGUMENT when they are no FileDescriptorSet whose files
    all resolve (each file's imports among them)."""
    digest = hashlib.sha256(descriptors).digest()
    found = _POOLS.get(digest)
    if found is not None:
        return found
    if len(descriptors) > MAX_DESCRIPTORS_BYTES:
        raise InvalidArgument(f"the proto descriptors are {len(descriptors)} bytes; a proto bundle's are at most "
                              f"{MAX_DESCRIPTORS_BYTES} (5 MiB, Spanner's limit)")
    try:
        files = list(descriptor_pb2.FileDescriptorSet.FromString(descriptors).file)
    except (DecodeError, RecursionError) as exc:
        raise InvalidArgument(f"the proto descriptors do not parse as a google.protobuf.FileDescriptorSet ({exc}); "
                              "give protoc --include_imports --descriptor_set_out's output") from None
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    while files:  # each file after its imports, whatever their order in the set
        ready = [f for f in files if all(d in added for d in f.dependency)]
        if not ready:
            missing = sorted({d for f in files for d in f.dependency if d not in added} - {f.name for f in files})
            held = ", ".join(missing) or "a cycle of imports"
            raise InvalidArgument(f"the proto descriptors import files they do not hold ({held}); build them with "
                                  "protoc --include_imports")
        for one in ready:
            try:
                pool.Add(one)
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"the proto descriptors' file {one.name!r} is invalid: {exc}") from None
            added.add(one.name)
        files = [f for f in files if f.name not in added]
    for name in added:  # a file's types resolve only once looked up
        try:
            pool.FindFileByName(name)
        except (KeyError, TypeError) as exc:
            raise InvalidArgument(f"the proto descriptors' file {name!r} is invalid: {exc}") from None
    if len(_POOLS) >= MAX_CACHED:
        _POOLS.clear()
    _POOLS[digest] = pool
    return pool


InUse = Callable[[str], Awaitable[dict[str, str]]]
"""The types a database's columns use: full name -> the column that uses it ("queue Orders",
"column Shipments.Status")."""


class Bundles:
    """Each database's proto bundle, recorded beside its queues (records), cached for
    CACHE_SECONDS; its DDL applied, all of a statement or nothing."""

    def __init__(self, records: Records) -> None:
        self._records = records
        self._cache: dict[str, tuple[float, Bundle | None]] = {}

    async def of(self, database: str | None) -> Bundle | None:
        """A database's bundle; None when it has none (the default namespace never has one)."""
        if database is None:
            return None
        cached = self._cache.get(database)
        if cached is None or time.monotonic() - cached[0] >= CACHE_SECONDS:
            found = await self._records.proto_bundle(database)
            bundle = Bundle(tuple(found[0]), found[1], pool_of(found[1])) if found is not None else None
            cached = (time.monotonic(), bundle)
            self._cache.pop(database, None)
            self._cache[database] = cached
            while len(self._cache) > MAX_CACHED:
                del self._cache[next(iter(self._cache))]
        return cached[1]

    def forget(self, database: str) -> None:
        """Forgets a database's bundle at once (the database was dropped: one made again under its
        name starts with none)."""
        self._cache.pop(database, None)

    async def resolve(self, database: str | None, t: SpannerType, what: str) -> SpannerType:
        """A table column's type with its proto type resolved in the database's bundle: PROTO for a
        message, ENUM for an enum (an ARRAY's element too); INVALID_ARGUMENT for one it lacks."""
        if t.element is not None:
            return dataclasses.replace(t, element=await self.resolve(database, t.element, what))
        if t.proto is None:
            return t
        bundle = await self.of(database)
        kind = bundle.kind(t.proto) if bundle is not None and t.proto in bundle.types else None
        if kind is None:
            raise InvalidArgument(f"{what}: Type not found: {t.proto} (a proto type must be in the database's proto "
                                  "bundle: CREATE PROTO BUNDLE or ALTER PROTO BUNDLE INSERT, with its descriptors)",
                                  type=t.proto)
        return SpannerType("PROTO" if kind == "message" else "ENUM", proto=t.proto)

    async def message_type(self, database: str | None, name: str, what: str) -> None:
        """Refuses a column of proto type ``name`` that is no message of the database's bundle."""
        bundle = await self.of(database)
        if bundle is None or name not in bundle.types:
            raise InvalidArgument(f"{what}: Type not found: {name} (a proto type must be in the database's proto "
                                  "bundle: CREATE PROTO BUNDLE or ALTER PROTO BUNDLE INSERT, with its descriptors)",
                                  type=name)
        if bundle.kind(name) != "message":
            raise InvalidArgument(f"{what}: {name} is a proto enum; a queue's Payload is BYTES, STRING, JSON or a "
                                  "proto message", type=name)

    async def check(self, database: str | None, name: str, payload: bytes, what: str) -> None:
        """Refuses (INVALID_ARGUMENT) a payload that does not parse as the message ``name``."""
        bundle = await self.of(database)
        if bundle is None or bundle.kind(name) != "message":
            raise errors.FailedPrecondition(f"{what}: the proto type {name} is not in the database's proto bundle")
        try:
            bundle.message(name).FromString(payload)
        except (DecodeError, RecursionError) as exc:
            raise InvalidArgument(f"{what} is not a valid {name} message ({exc}): give the message's bytes "
                                  "(SerializeToString), base64-encoded, or the message itself", type=name) from None

    async def check_typed(self, database: str | None, t: SpannerType, value: Any, what: str) -> None:
        """Refuses (INVALID_ARGUMENT) a value of a table's PROTO column that does not parse as its
        message, or of an ENUM column that is no number of its enum; arrays element by element."""
        if value is None:
            return
        if t.element is not None:
            for i, one in enumerate(value):
                await self.check_typed(database, t.element, one, f"{what}[{i}]")
        elif t.code == "PROTO" and t.proto:
            await self.check(database, t.proto, value, what)
        elif t.code == "ENUM" and t.proto:
            bundle = await self.of(database)
            if bundle is None or bundle.kind(t.proto) != "enum":
                raise errors.FailedPrecondition(f"{what}: the proto enum {t.proto} is not in the database's proto "
                                                "bundle")
            if value not in bundle.pool.FindEnumTypeByName(t.proto).values_by_number:
                raise InvalidArgument(f"{what}: {value} is no value of the enum {t.proto}", type=t.proto)

    async def ddl(self, s: ProtoBundle, database: str | None, descriptors: bytes, in_use: InUse) -> None:
        """Applies CREATE, ALTER or DROP PROTO BUNDLE to ``database`` with the request's
        ``descriptors`` (ALTER keeps the bundle's when none are given)."""
        if database is None:
            raise errors.FailedPrecondition(
                "proto bundles belong to a database made by CreateDatabase; this name reaches spanq's default "
                "namespace, which has none")
        self._cache.pop(database, None)
        current = await self.of(database)
        self._cache.pop(database, None)
        shown = f"{s.action.upper()} PROTO BUNDLE"
        if s.action == "create":
            if current is not None:
                raise errors.FailedPrecondition(f"{shown}: the database has a proto bundle; change it with ALTER "
                                                "PROTO BUNDLE")
            if not descriptors:
                raise InvalidArgument(f"{shown} needs proto descriptors (the request's proto_descriptors: "
                                      "database.update_ddl(statements, proto_descriptors=...))")
            await self._put(database, s.insert, descriptors, shown, None)
            return
        if current is None:
            raise errors.FailedPrecondition(f"{shown}: the database has no proto bundle (CREATE PROTO BUNDLE)")
        used = await in_use(database)
        if s.action == "drop":
            self._refuse_in_use(shown, current.types, used)
            await self._records.drop_proto_bundle(database)
            return
        bundled = set(current.types)
        for clause, names in (("INSERT", s.insert), ("UPDATE", s.update), ("DELETE", s.delete)):
            for name in names:
                if (name in bundled) != (clause != "INSERT"):
                    state = "is already in" if clause == "INSERT" else "is not in"
                    raise errors.FailedPrecondition(f"{shown} {clause}: {name} {state} the proto bundle", type=name)
        if (s.insert or s.update) and not descriptors:
            raise InvalidArgument(f"{shown} INSERT or UPDATE needs proto descriptors (the request's "
                                  "proto_descriptors) holding every type of the bundle")
        self._refuse_in_use(shown + " DELETE", s.delete, used)
        types = tuple(t for t in current.types if t not in s.delete) + s.insert
        if not types:
            raise errors.FailedPrecondition(f"{shown} would leave the bundle without a type; DROP PROTO BUNDLE")
        await self._put(database, types, descriptors or current.descriptors, shown, current, used)

    @staticmethod
    def _refuse_in_use(shown: str, types: tuple[str, ...], used: dict[str, str]) -> None:
        for name in types:
            if name in used:
                raise errors.FailedPrecondition(f"{shown}: proto type {name} is used by {used[name]}; drop or change "
                                                "that first", type=name)

    async def _put(self, database: str, types: tuple[str, ...], descriptors: bytes, shown: str,
                   previous: Bundle | None, used: dict[str, str] | None = None) -> None:
        pool = pool_of(descriptors)
        for name in types:
            if kind_of(pool, name) is None:
                raise InvalidArgument(f"{shown}: proto type {name} is not in the proto descriptors given (a message "
                                      "or enum's full name, package first, case-sensitive)", type=name)
        for name, column in (used or {}).items():
            before = previous.kind(name) if previous is not None else None
            if before is not None and kind_of(pool, name) != before:
                raise errors.FailedPrecondition(f"{shown}: {name} would be no proto {before} any more, and {column} "
                                                "uses it", type=name)
        replaced = (list(previous.types), previous.descriptors) if previous is not None else None
        if not await self._records.put_proto_bundle(database, list(types), descriptors, replaced):
            raise errors.FailedPrecondition(
                f"{shown}: the database has a proto bundle" + (" (changed meanwhile: run the statement again)"
                                                               if previous is not None else
                                                               "; change it with ALTER PROTO BUNDLE"))
        self._cache.pop(database, None)
