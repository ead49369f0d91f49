"""The lexer of both grammars: tokens (one loop, ``tokenize``, over each grammar's
pattern of its dialect), quoted literals, names folded one way, the cursor a
recursive-descent parser walks the tokens with, and the limits every statement is
read within.

The parser reads the queue surface (in both dialects) and the table subset;
each has its own words (a token pattern here)
and grammar, and the same rules for what a name, a literal, a parse error and a
limit are.

The limits bound the work of reading one statement, which runs on the server's
event loop: its length is checked before it is read, its tokens as they are
read and its nesting as it is parsed, so a statement past one is refused
(INVALID_ARGUMENT naming the limit, ``limit`` in the error's metadata) having
cost no more than one within them.
"""

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from ...errors import InvalidArgument

MAX_STATEMENT_LENGTH = 1_000_000
"""Characters of the longest statement: Spanner's own limit ("Query statement length: 1 million
characters"), checked before anything is read."""
MAX_TOKENS = 10_000
"""Tokens (words, names, literals, parameters, operators and punctuation) of the longest
statement. A token costs some microseconds to read, translate and bind (twice, when the queue
parser reads a table's statement first): this bounds a statement to about a tenth of a second of
the event loop at a time. An IN list of about 4,990 values fits; a longer list is one array
parameter (IN UNNEST(@values)), many rows are mutations."""
MAX_DEPTH = 75
"""Levels of nesting: each parenthesis, NOT, array and function call is one, and so is each
operator of a chain of + - * (a + b + c nests as (a + b) + c). Spanner's limit of nested function
calls is 75 too; the parsers and the translation recurse once or a few times per level, well
within Python's stack."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """A name as spanq knows it: A-Z become a-z, and nothing else changes. Unicode's own
    lower-casing would turn a few other characters into ASCII letters (KELVIN SIGN
    U+212A into "k"), making two spellings of one queue; kept as they are, they fail
    the name rules (lowercase ASCII letters, digits, _) with INVALID_ARGUMENT. The one
    rule for every name of this front-end: statements, mutations and the token checks."""
    return name.translate(_ASCII_LOWER)


def check_length(text: str) -> None:
    """A statement longer than MAX_STATEMENT_LENGTH is refused before it is read."""
    if len(text) > MAX_STATEMENT_LENGTH:
        raise InvalidArgument(f"the statement is {len(text):,} characters long; spanq reads statements of at most "
                              f"{MAX_STATEMENT_LENGTH:,} characters (Spanner's limit too): pass large values as "
                              "parameters", limit="statement_length")


def too_many_tokens() -> InvalidArgument:
    return InvalidArgument(f"the statement has more than {MAX_TOKENS:,} tokens (words, names, literals, parameters "
                           "and punctuation), spanq's limit: pass a long list as one array parameter "
                           "(IN UNNEST(@values)), and many rows as mutations", limit="statement_tokens")


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`", "0": "\0"}
_ESCAPE = re.compile(r"\\(?:[xX]([0-9A-Fa-f]{2})|(.))", re.S)


class Token(NamedTuple):
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
    """A quoted literal's value; \\xHH is a byte in a bytes literal, a character in a string.
    The common escapes are replaced by str.replace, so that a long literal costs little more
    than its copy."""
    body = text[1:-1]
    if raw or "\\" not in body:
        return body.encode() if as_bytes else body
    if "\\x" not in body and "\\X" not in body:
        # Every backslash starts a two-character escape: split off the escaped backslashes
        # (leftmost first, as a reader pairs them), then each piece's escapes are unambiguous.
        pieces = body.split("\\\\")
        for i, piece in enumerate(pieces):
            if "\\" in piece:
                for escape, char in _ESCAPES.items():
                    piece = piece.replace("\\" + escape, char)
                if "\\" in piece:
                    raise _unsupported(piece[piece.index("\\") + 1], text)
                pieces[i] = piece
        out = "\\".join(pieces)
        return out.encode() if as_bytes else out
    chunks: list[bytes] = []
    last = 0
    for match in _ESCAPE.finditer(body):
        chunks.append(body[last:match.start()].encode())
        code, char = match.groups()
        if code is not None:
            chunks.append(bytes([int(code, 16)]) if as_bytes else chr(int(code, 16)).encode())
        elif char in _ESCAPES:
            chunks.append(_ESCAPES[char].encode())
        else:
            raise _unsupported(char, text)
        last = match.end()
    chunks.append(body[last:].encode())
    value = b"".join(chunks)
    return value if as_bytes else value.decode()


def _unsupported(char: str, text: str) -> InvalidArgument:
    return InvalidArgument(f"unsupported escape \\{char} in {text[:40]}")


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


# -- tokens --------------------------------------------------------------------------
#
# Each grammar reads its own words of a dialect: the queue surface's GoogleSQL and
# PostgreSQL, and the table subset's GoogleSQL (floats, hex numbers, +). One loop reads
# them all.

_SPACE = r"(?:\s|--[^\n]*|\#[^\n]*|/\*.*?\*/)*+"
_PG_SPACE = r"(?:\s|--[^\n]*|/\*.*?\*/)*+"
"""Space and comments before a token, taken possessively (a long run is never tried again)."""
GOOGLESQL_QUEUE = re.compile(_SPACE + r"""
    (?:
      (?P<bytes>[bB][rR]?(?:'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"))
    | (?P<string>[rR]?(?:'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"))
    | (?P<param>@[A-Za-z_][A-Za-z0-9_]*)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)
    | (?P<number>\d+)
    | (?P<punct>=>|<=|>=|!=|<>|[(),*=<>\[\];.-])
    | (?P<end>\Z)
    )
    """,
    re.X | re.S,
)
POSTGRESQL_QUEUE = re.compile(_PG_SPACE + r"""
    (?:
      (?P<string>'[^']*+(?:''[^']*+)*+')
    | (?P<ident>"(?=[^"]|"")[^"]*+(?:""[^"]*+)*+"|[A-Za-z_][A-Za-z0-9_]*)
    | (?P<param>\$[1-9][0-9]{0,4})
    | (?P<number>\d+)
    | (?P<punct>=>|:=|<=|>=|!=|<>|[(),*=<>\[\];.+-])
    | (?P<end>\Z)
    )
    """,
    re.X | re.S,
)
"""Spanner's PostgreSQL dialect: "..." is a name, '...' a string ('' is a quote, backslashes are
plain), $1 a parameter (named p1 in the request), := names an argument as => does."""
GOOGLESQL_TABLE = re.compile(
    r"""
    (?:\s|--[^\n]*|\#[^\n]*|/\*.*?\*/)*+
    (?:
      (?P<bytes>[bB][rR]?(?:'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"))
    | (?P<string>[rR]?(?:'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"))
    | (?P<param>@[A-Za-z_][A-Za-z0-9_]*)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*|`[^`\n]+`)
    | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
    | (?P<number>0[xX][0-9A-Fa-f]+|\d+)
    | (?P<punct><=|>=|!=|<>|[(),*=<>\[\];.+-])
    | (?P<end>\Z)
    )
    """,
    re.X | re.S,
)
"""A token after any space and comments (possessively: a long run of space is never tried
again); <end> is the end of the text."""
MAX_NUMBER_DIGITS = 19
"""Digits of the longest INT64 (its range is checked where the value meets its column)."""


def tokenize(text: str, pattern: "re.Pattern[str]", supported: Callable[[], str],
             long_number: Callable[[str], InvalidArgument], pg: bool = False) -> list[Token]:
    """The tokens of a statement by a grammar's ``pattern`` (``pg``: Spanner's PostgreSQL dialect),
    ending with an ``end`` token; INVALID_ARGUMENT where the text cannot be read (naming what
    the grammar understands: ``supported``), past MAX_TOKENS, or for a number of more than
    MAX_NUMBER_DIGITS digits (``long_number`` says it)."""
    check_length(text)
    tokens: list[Token] = []
    pos, match, append = 0, pattern.match, tokens.append
    while True:
        found = match(text, pos)
        if found is None:
            rest = text[pos:].lstrip()
            raise InvalidArgument(f"cannot read the statement at {rest[:20]!r}; {supported()}")
        kind = found.lastgroup or ""
        if kind == "end":
            break
        if len(tokens) >= MAX_TOKENS:
            raise too_many_tokens()
        pos = found.end()
        raw = found.group(kind)
        if kind == "punct":
            append(Token("punct", raw, "=>" if raw == ":=" else raw))
        elif pg and kind == "string":
            append(Token("string", raw, raw[1:-1].replace("''", "'")))
        elif pg and kind == "ident":
            quoted = raw[0] == '"'
            append(Token("ident", raw, fold(raw[1:-1].replace('""', '"') if quoted else raw),
                         None if quoted else fold(raw)))
        elif pg and kind == "param":
            append(Token("param", raw, f"p{raw[1:]}"))
        elif (token := googlesql_token(kind, raw)) is not None:
            append(token)
        elif kind == "float":
            append(Token("float", raw, float(raw)))
        else:
            if len(raw.lstrip("0")) > MAX_NUMBER_DIGITS:  # int() of thousands of digits is refused, or slow
                raise long_number(raw)
            append(Token("number", raw, int(raw, 16) if raw[:2].lower() == "0x" else int(raw)))
    append(Token("end", "", None))
    return tokens


class Cursor:
    """A parser's position in its tokens, and the errors it raises where it stops:
    INVALID_ARGUMENT naming what was expected, what was found, and (``supported``)
    what the parser understands."""

    passes = 0
    """How many times a grammar has read a statement's tokens, in this process: one Cursor is
    one parse (tests/unit/test_parse_once.py counts them)."""

    def __init__(self, text: str, tokens: list[Token], supported: Callable[[], str]) -> None:
        Cursor.passes += 1
        self.text = text
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        """Levels of nesting entered and not yet left (MAX_DEPTH)."""
        self._supported = supported

    def deeper(self, levels: int = 1) -> None:
        """Enters ``levels`` levels of nesting; past MAX_DEPTH, INVALID_ARGUMENT. Whoever enters
        leaves (``self.depth -= levels``) once the nested part is read."""
        self.depth += levels
        if self.depth > MAX_DEPTH:
            raise InvalidArgument(f"the statement nests more than {MAX_DEPTH} levels deep, spanq's limit (each "
                                  "parenthesis, NOT, array, function call and + - * of a chain is a level; Spanner "
                                  f"allows {MAX_DEPTH} nested function calls): write it flatter, or pass the values "
                                  "as parameters", limit="statement_depth")

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
