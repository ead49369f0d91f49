"""Array parameters as array literals, for the hot statements (sends, acks, the
commit ledger's group claims).

psycopg adapts a Python list by itself, but it dumps a list one element at a time
in Python. Measured with psycopg 3.3 (binary build), 100 elements:
``Transformer.dump_sequence`` takes 77 us for strings (22 us in binary format),
35 us for ints and 136 us for bytes (18 us binary), where the literals below take
about 3 us. That was 6% of the server's CPU while acking and a third of an Ack
statement's, so the lists that dominate those statements go as literals; every other
list (NULLs among values, timestamps, a NUL in a string) still goes to psycopg.
"""

from typing import Any


def array_literal(values: list[Any]) -> Any:
    """A text[] or bigint[] parameter as one array literal, built by C string methods;
    anything else as the list itself, for psycopg to adapt."""
    kinds = set(map(type, values))
    if kinds == {str}:
        joined = "\x00".join(values)
        if joined.count("\x00") != len(values) - 1:
            return values  # a NUL in a value: PostgreSQL rejects it, as before
        return '{"' + joined.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", '","') + '"}'
    if kinds == {int}:
        return "{" + ",".join(map(str, values)) + "}"
    if kinds == {type(None)}:
        return None  # unnest pads a NULL array with NULLs
    return values


def bytea_array_literal(values: list[bytes]) -> str:
    """A bytea[] parameter as one array literal of hex strings."""
    return "{" + ",".join(['"\\\\x' + v.hex() + '"' for v in values]) + "}"
