"""The one lexer of the grammar: tokens (``tokenize(text, dialect, surface)``, one loop
over one pattern of tokens with each dialect's and surface's words, ``WORDS``), quoted
literals, names folded one way, the cursor the parser walks the tokens with, and the
limits every statement is read within.

The parser reads the queue surface (in both dialects) and the table subset with the
same rules for what a name, a literal, a parse error and a limit are.

The limits bound the work of reading one statement, which runs on the server's
event loop: its length is checked before it is read, its tokens as they are
read and its nesting as it is parsed, so a statement past one is refused
(INVALID_ARGUMENT naming the limit, ``limit`` in the error's metadata) having
cost no more than one within them.
"""

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from ...ground.errors import InvalidArgument
from .dialects import Dialect, Surface, supported

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
# One pattern of tokens, with the differences of each dialect and surface: the words
# a surface has always read, so that its errors keep their words (the queue surface's
# GoogleSQL reads no float, hex number or +, and reads => for its named arguments).

_QUOTED = r"""(?:'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+")"""
"""GoogleSQL's quoted text, '...' or "...", with backslash escapes, on one line."""
_WORD = r"[A-Za-z_][A-Za-z0-9_]*"


class _Words(NamedTuple):
    """What one dialect, on one surface, reads as each kind of token (in this order)."""

    space: str
    """Space and comments before a token, taken possessively (a long run is never tried again)."""
    bytes: str | None
    string: str
    param: str
    ident: str
    float: str | None
    number: str
    punct: str

    def pattern(self) -> "re.Pattern[str]":
        kinds = [(kind, getattr(self, kind)) for kind in ("bytes", "string", "param", "ident", "float", "number",
                                                           "punct")]
        alternatives = "|".join(f"(?P<{kind}>{found})" for kind, found in kinds if found is not None)
        return re.compile(f"{self.space}(?:{alternatives}|(?P<end>\\Z))", re.S)


_GOOGLESQL = _Words(
    space=r"(?:\s|--[^\n]*|\#[^\n]*|/\*.*?\*/)*+",
    bytes=r"[bB][rR]?" + _QUOTED,
    string=r"[rR]?" + _QUOTED,
    param=r"@" + _WORD,
    ident=_WORD + r"|`[^`\n]+`",
    float=r"(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+",
    number=r"0[xX][0-9A-Fa-f]+|\d+",
    punct=r"<=|>=|!=|<>|\|\||[(),*=<>\[\];.+-]",
)
"""The table subset's GoogleSQL."""
WORDS: dict[tuple[Dialect, Surface], _Words] = {
    (Dialect.GOOGLESQL, Surface.TABLE): _GOOGLESQL,
    (Dialect.GOOGLESQL, Surface.QUEUE): _GOOGLESQL._replace(
        ident=_WORD + r"|`[^`]+`", float=None, number=r"\d+", punct=r"=>|<=|>=|!=|<>|[(),*=<>\[\];.-]"),
    (Dialect.POSTGRESQL, Surface.QUEUE): _Words(
        space=r"(?:\s|--[^\n]*|/\*.*?\*/)*+",
        bytes=None,
        string=r"'[^']*+(?:''[^']*+)*+'",
        param=r"\$[1-9][0-9]{0,4}",
        ident=r'"(?=[^"]|"")[^"]*+(?:""[^"]*+)*+"|' + _WORD,
        float=None,
        number=r"\d+",
        punct=r"=>|:=|<=|>=|!=|<>|[(),*=<>\[\];.+-]",
    ),
}
WORDS[Dialect.POSTGRESQL, Surface.TABLE] = WORDS[Dialect.POSTGRESQL, Surface.QUEUE]._replace(
    float=_GOOGLESQL.float, punct=r"<=|>=|!=|<>|[(),*=<>\[\];.+-]")
"""Spanner's PostgreSQL dialect: "..." is a name, '...' a string ('' is a quote, backslashes are
plain), $1 a parameter (named p1 in the request), := names an argument as => does; its table
subset reads numbers with a fraction too."""
_PATTERNS = {key: words.pattern() for key, words in WORDS.items()}
MAX_NUMBER_DIGITS = 19
"""Digits of the longest INT64 (its range is checked where the value meets its column)."""


def tokenize(text: str, dialect: Dialect, surface: Surface) -> list[Token]:
    """The tokens of a statement as ``surface`` reads them in ``dialect`` (``WORDS``), ending with
    an ``end`` token; INVALID_ARGUMENT where the text cannot be read (naming what the surface
    understands), past MAX_TOKENS, or for a number of more than MAX_NUMBER_DIGITS digits."""
    check_length(text)
    tokens: list[Token] = []
    pg = dialect is Dialect.POSTGRESQL
    pos, match, append = 0, _PATTERNS[dialect, surface].match, tokens.append
    while True:
        found = match(text, pos)
        if found is None:
            rest = text[pos:].lstrip()
            raise InvalidArgument(f"cannot read the statement at {rest[:20]!r}; {supported(surface)}")
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
                raise _long_number(surface, raw)
            append(Token("number", raw, int(raw, 16) if raw[:2].lower() == "0x" else int(raw)))
    append(Token("end", "", None))
    return tokens


def _long_number(surface: Surface, raw: str) -> InvalidArgument:
    """A number of more digits than an INT64's, as each surface has always said it."""
    if surface is Surface.QUEUE:
        return InvalidArgument(f"the number {raw[:24]}... has {len(raw)} digits: an INT64 literal has at "
                               f"most {MAX_NUMBER_DIGITS} (-9223372036854775808 to 9223372036854775807)")
    return InvalidArgument(f"the number {raw[:24]}... is longer than an INT64")


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
        """The next token; the end, once a rule has taken the end (to say what it expected there)."""
        return self.tokens[min(self.pos, len(self.tokens) - 1)]

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
