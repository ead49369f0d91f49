"""What both GoogleSQL parsers share: tokens, quoted literals, names folded one
way, and the cursor a recursive-descent parser walks the tokens with.

``statements.py`` reads the queue statements (in both dialects) and
``googlesql.py`` the table subset; each has its own token pattern and grammar,
and the same rules for what a name, a literal and a parse error are.
"""

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgument

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """A name as spanq knows it: A-Z become a-z, and nothing else changes. Unicode's own
    lower-casing would turn a few other characters into ASCII letters (KELVIN SIGN
    U+212A into "k"), making two spellings of one queue; kept as they are, they fail
    the name rules (lowercase ASCII letters, digits, _) with INVALID_ARGUMENT. The one
    rule for every name of this front-end: statements, mutations and the token checks."""
    return name.translate(_ASCII_LOWER)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`", "0": "\0"}


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str
    text: str
    value: Any = None
    shown: str | None = None
    """A name as results show it, when not as written (PostgreSQL folds unquoted names)."""

    def is_word(self, *words: str) -> bool:
        return self.kind == "ident" and not self.text.startswith(("`", '"')) and self.value in words

    @property
    def spelled(self) -> str:
        """An identifier as written (without quotes): the name results show."""
        if self.shown is not None:
            return self.shown
        if self.text.startswith('"'):
            return self.text[1:-1].replace('""', '"')
        return self.text[1:-1] if self.text.startswith("`") else self.text


def unquote(text: str, raw: bool, as_bytes: bool = False) -> Any:
    """A quoted literal's value; \\xHH is a byte in a bytes literal, a character in a string."""
    body = text[1:-1]
    if raw:
        return body.encode() if as_bytes else body
    out, i = bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "xX" and re.fullmatch(r"[0-9A-Fa-f]{2}", body[i + 2:i + 4]):
                code = int(body[i + 2:i + 4], 16)
                out += bytes([code]) if as_bytes else chr(code).encode()
                i += 4
                continue
            if nxt not in _ESCAPES:
                raise InvalidArgument(f"unsupported escape \\{nxt} in {text[:40]}")
            out += _ESCAPES[nxt].encode()
            i += 2
        else:
            out += ch.encode()
            i += 1
    if as_bytes:
        return bytes(out)
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise InvalidArgument(f"the string literal {text[:40]} is not valid UTF-8") from None


def googlesql_token(kind: str, raw: str) -> Token | None:
    """The token of a GoogleSQL string, bytes, @param or name (`quoted` or not);
    None for any other kind, which each parser reads its own way."""
    if kind == "string":
        is_raw = raw[0] in "rR"
        return Token("string", raw, unquote(raw[1:] if is_raw else raw, is_raw))
    if kind == "bytes":
        is_raw = raw[1] in "rR"
        return Token("bytes", raw, unquote(raw[2:] if is_raw else raw[1:], is_raw, as_bytes=True))
    if kind == "param":
        return Token("param", raw, raw[1:])
    if kind == "ident":
        return Token("ident", raw, fold(raw[1:-1] if raw.startswith("`") else raw))
    return None


class Cursor:
    """A parser's position in its tokens, and the errors it raises where it stops:
    INVALID_ARGUMENT naming what was expected, what was found, and (``supported``)
    what the parser understands."""

    def __init__(self, text: str, tokens: list[Token], supported: Callable[[], str]) -> None:
        self.text = text
        self.tokens = tokens
        self.pos = 0
        self._supported = supported

    @property
    def peek(self) -> Token:
        return self.tokens[self.pos]

    def ahead(self, n: int = 1) -> Token:
        return self.tokens[min(self.pos + n, len(self.tokens) - 1)]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def error(self, expected: str) -> InvalidArgument:
        token = self.peek
        found = "the end of the statement" if token.kind == "end" else repr(token.text)
        return InvalidArgument(f"expected {expected} but found {found} in: {self.text.strip()[:200]}; "
                               f"{self._supported()}")

    def word(self, *words: str) -> str:
        if not self.peek.is_word(*words):
            raise self.error(" or ".join(w.upper() for w in words))
        return str(self.next().value)

    def accept_word(self, *words: str) -> bool:
        if self.peek.is_word(*words):
            self.pos += 1
            return True
        return False

    def punct(self, *marks: str) -> str:
        if not self.at_punct(*marks):
            raise self.error(" or ".join(repr(m) for m in marks))
        return str(self.next().value)

    def accept_punct(self, mark: str) -> bool:
        if self.at_punct(mark):
            self.pos += 1
            return True
        return False

    def at_punct(self, *marks: str) -> bool:
        return self.peek.kind == "punct" and self.peek.value in marks

    def end(self) -> None:
        self.accept_punct(";")
        if self.peek.kind != "end":
            raise self.error("the end of the statement")
