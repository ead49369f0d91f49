"""Writes the API reference at the end of docs/sdk.md from the SDK's docstrings.

    .venv/bin/python tools/gen_sdk_reference.py           # rewrite the reference
    .venv/bin/python tools/gen_sdk_reference.py --check   # exit 1 if docs/sdk.md is stale

Everything in docs/sdk.md above the MARKER line is hand-written and kept; everything below it is generated:
every name in ``spanq.__all__``, ``spanq.aio.__all__`` and ``spanq.sql.__all__`` (plus the documented
module-level names of each module) with its signature and docstring, and for classes their public methods,
properties and documented attributes. Attribute docstrings (a string right after an assignment) are read
from the source with ``ast``, since Python does not keep them.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import pathlib
import re
import sys
import typing
from datetime import timedelta
import types
from types import ModuleType
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "sdk.md"
MARKER = "<!-- Generated below from the docstrings by tools/gen_sdk_reference.py: edit those, not this. -->"

sys.path.insert(0, str(ROOT / "client"))

import spanq  # noqa: E402
import spanq.aio  # noqa: E402
import spanq.sql  # noqa: E402

SIGNATURE_TYPES = {"Callback": "_subscriber.py", "AckTarget": "_requests.py", "LeaseTarget": "_requests.py",
                   "ProgressCallback": "_admin.py"}
"""Private aliases that public signatures name, and where they are defined."""

MADE_BY_THE_SDK = {"Message", "Subscription", "Future", "CommitResult", "RenewedLease"}
"""Classes whose instances the SDK makes: shown without a constructor."""


# -- reading the source -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Source:
    """Attribute docstrings and alias definitions found in one module's source."""

    attributes: dict[str, dict[str, tuple[str, str]]]  # class name -> attribute -> (annotation, docstring)
    module_attributes: dict[str, tuple[str, str]]  # name -> (definition, docstring)


_SOURCES: dict[str, Source] = {}


def _doc_after(body: list[ast.stmt], index: int) -> str | None:
    if index + 1 < len(body):
        nxt = body[index + 1]
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            return inspect.cleandoc(nxt.value.value)
    return None


def source_of(path: str) -> Source:
    if path in _SOURCES:
        return _SOURCES[path]
    text = pathlib.Path(path).read_text()
    tree = ast.parse(text)
    classes: dict[str, dict[str, tuple[str, str]]] = {}
    module: dict[str, tuple[str, str]] = {}
    for i, node in enumerate(tree.body):
        target: ast.expr | None
        value: ast.expr | None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            target, value = None, None
        if isinstance(target, ast.Name) and (doc := _doc_after(tree.body, i)) is not None:
            module[target.id] = ((ast.get_source_segment(text, value) or "") if value is not None else "", doc)
        if isinstance(node, ast.ClassDef):
            found: dict[str, tuple[str, str]] = {}
            for j, item in enumerate(node.body):
                if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                        and not item.target.id.startswith("_")):
                    found[item.target.id] = (ast.get_source_segment(text, item.annotation) or "",
                                             _doc_after(node.body, j) or "")
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    for k, stmt in enumerate(item.body):
                        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Attribute)
                                and isinstance(stmt.target.value, ast.Name) and stmt.target.value.id == "self"
                                and not stmt.target.attr.startswith("_")):
                            doc = _doc_after(item.body, k)
                            if doc is not None:
                                found[stmt.target.attr] = (ast.get_source_segment(text, stmt.annotation) or "", doc)
            classes[node.name] = found
    _SOURCES[path] = Source(classes, module)
    return _SOURCES[path]


def class_file(cls: type) -> str:
    """The file that defines ``cls`` (its ``__module__`` may have been set to the public package)."""
    for value in vars(cls).values():
        func = getattr(value, "fget", None) or getattr(value, "__func__", None) or value
        code = getattr(inspect.unwrap(func) if callable(func) else func, "__code__", None)
        if code is not None and code.co_filename.endswith(".py") and "spanq" in code.co_filename:
            return str(code.co_filename)
    for path in sorted((ROOT / "client" / "spanq").glob("*.py")):
        if re.search(rf"^class {cls.__name__}\b", path.read_text(), re.M):
            return str(path)
    raise LookupError(f"no source for {cls!r}")


# -- rendering --------------------------------------------------------------------------------------------


def annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    if isinstance(value, str):
        return value
    return inspect.formatannotation(value)


def default(value: Any) -> str:
    if isinstance(value, timedelta):
        return f"timedelta(seconds={value.total_seconds():g})"
    if isinstance(value, spanq.Retry) and value == spanq.Retry():
        return "Retry()"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def signature(obj: Any, *, drop_first: bool = True) -> str:
    sig = inspect.signature(obj)
    parts: list[str] = []
    params = list(sig.parameters.values())
    if drop_first and params and params[0].name in ("self", "cls"):
        params = params[1:]
    star_done = False
    for index, param in enumerate(params):
        if param.kind == param.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if param.kind == param.VAR_POSITIONAL:
            star_done = True
            text = f"*{param.name}"
        elif param.kind == param.VAR_KEYWORD:
            text = f"**{param.name}"
        else:
            text = param.name
        if param.annotation is not param.empty:
            text += f": {annotation(param.annotation)}"
            if param.default is not param.empty:
                text += f" = {default(param.default)}"
        elif param.default is not param.empty:
            text += f"={default(param.default)}"
        parts.append(text)
        if param.kind == param.POSITIONAL_ONLY and (index + 1 == len(params) or params[index + 1].kind != param.POSITIONAL_ONLY):
            parts.append("/")
    out = f"({', '.join(parts)})"
    if sig.return_annotation is not sig.empty:
        out += f" -> {annotation(sig.return_annotation)}"
    return out


def docstring(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    # reStructuredText's "::" before a literal block reads as ":" in Markdown (the indented block stays code).
    return re.sub(r"::\n\n", ":\n\n", doc)


def block(text: str) -> list[str]:
    return [text, ""] if text else []


def kind_of(func: Any) -> str:
    inner = getattr(func, "__wrapped__", None)
    if inspect.iscoroutinefunction(func):
        return "async "
    if inner is not None and inspect.isasyncgenfunction(inner):
        return "async with "
    if inner is not None and inspect.isgeneratorfunction(inner):
        return "with "
    return ""


def render_function(qualname: str, func: Any, level: str) -> list[str]:
    overloads = typing.get_overloads(func)
    lines: list[str] = []
    if overloads:
        lines.append(f"{level} `{qualname}`")
        lines.append("")
        lines.append("```python")
        lines.extend(f"{qualname}{signature(o, drop_first=False)}" for o in overloads)
        lines.append("```")
        lines.append("")
    else:
        lines.append(f"{level} `{kind_of(func)}{qualname}{signature(func)}`")
        lines.append("")
    return lines + block(docstring(func))


def public_members(cls: type) -> list[tuple[str, Any]]:
    members = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or isinstance(value, property):
            members.append((name, value))
    return members


def render_class(qualname: str, cls: type) -> list[str]:
    lines: list[str] = []
    if issubclass(cls, BaseException):
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        lines += [f"### exception `{qualname}({bases})`", ""]
    elif issubclass(cls, enum.Enum):
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        lines += [f"### enum `{qualname}({bases})`", ""]
    elif cls.__name__ in MADE_BY_THE_SDK:
        lines += [f"### class `{qualname}`", ""]
    else:
        lines += [f"### class `{qualname}{signature(cls.__init__)}`".replace(" -> None`", "`"), ""]
    lines += block(docstring(cls))
    if issubclass(cls, enum.Enum):
        lines += [", ".join(f"`{m.name}`" for m in cls), ""]
        return lines
    source = source_of(class_file(cls))
    attributes = source.attributes.get(cls.__name__, {})
    short = qualname.rsplit(".", 1)[-1]
    for name, (ann, doc) in attributes.items():
        if isinstance(vars(cls).get(name), property):
            continue
        lines += [f"#### `{short}.{name}: {ann}`", ""] + block(doc)
    for name, member in public_members(cls):
        if isinstance(member, property):
            ann = annotation(inspect.signature(member.fget).return_annotation) if member.fget else ""
            lines += [f"#### `{short}.{name}: {ann}` (read-only)", ""] + block(docstring(member))
        else:
            lines += render_function(f"{short}.{name}", member, "####")
    return lines


def render_name(module: ModuleType, name: str) -> list[str]:
    obj = getattr(module, name)
    qualname = f"{module.__name__}.{name}"
    if isinstance(obj, ModuleType):
        return [f"### module `{obj.__name__}`", "", f"See [{obj.__name__}](#reference-{obj.__name__.replace('.', '')}).", ""]
    if inspect.isclass(obj) and not isinstance(obj, types.GenericAlias):
        return render_class(qualname, obj)
    if inspect.isfunction(obj):
        return render_function(qualname, obj, "###")
    # A type alias or a constant: its definition and attribute docstring, from the module's own source or,
    # for a name it re-exports, from the private module that defines it.
    own = pathlib.Path(module.__file__ or "")
    for path in [own, *sorted(own.parent.glob("_*.py"))]:
        found = source_of(str(path)).module_attributes.get(name)
        if found is not None:
            definition, doc = found
            one_line = " ".join(definition.split())
            shown = one_line if len(one_line) <= 100 else "{...}"
            return [f"### `{qualname} = {shown}`", ""] + block(doc)
    raise LookupError(f"cannot document {qualname}")


def documented_extras(module: ModuleType) -> list[str]:
    """Public module-level names of ``module``'s own file that carry an attribute docstring, beyond __all__."""
    names = source_of(module.__file__ or "").module_attributes
    return [n for n in names if not n.startswith("_") and n not in module.__all__ and hasattr(module, n)]


def render() -> str:
    lines = [MARKER, ""]
    for module in (spanq, spanq.aio, spanq.sql):
        lines += [f"## Reference: `{module.__name__}`", ""] + block(docstring(module))
        for name in [*module.__all__, *documented_extras(module)]:
            lines += render_name(module, name)
    lines += ["## Reference: types named in signatures", ""]
    for name, file in SIGNATURE_TYPES.items():
        definition, doc = source_of(str(ROOT / "client" / "spanq" / file)).module_attributes[name]
        lines += [f"### `{name} = {' '.join(definition.split())}`", ""] + block(doc)
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def public_names() -> list[str]:
    """Every public name the reference must cover, qualified."""
    return [f"{m.__name__}.{n}" for m in (spanq, spanq.aio, spanq.sql) for n in m.__all__]


def updated(current: str) -> str:
    head, sep, _ = current.partition(MARKER)
    if not sep:
        raise SystemExit(f"{DOC} has no marker line; add it where the generated reference should start:\n{MARKER}")
    return head + render()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/sdk.md is not up to date")
    args = parser.parse_args()
    current = DOC.read_text()
    new = updated(current)
    if args.check:
        if new != current:
            print(f"{DOC.relative_to(ROOT)} is stale: run .venv/bin/python tools/gen_sdk_reference.py", file=sys.stderr)
            sys.exit(1)
        return
    if new != current:
        DOC.write_text(new)
        print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
