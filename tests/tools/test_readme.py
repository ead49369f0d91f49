"""The README runs as printed, against a real server: its Python quick start (twice), and
all its sessions top to bottom in one database, as a newcomer would run them."""

import asyncio
import contextlib
import dataclasses
import io
import re

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from ..helpers import create_queue
from ..readme_session import README, replay

QUICK_START = "Quick start (Python)"
UNKNOWN_COMMIT = "Exactly once: request ids and UNKNOWN_COMMIT"
SESSIONS = ["From the command line", "From grpcurl", UNKNOWN_COMMIT, "From psql"]
"""The sections with console sessions, in the README's order (the test checks it)."""


def quick_start() -> str:
    section = README.read_text().split(f"## {QUICK_START}", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def run_quick_start(target: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = quick_start().replace("localhost:50051", target)
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    return out.getvalue().strip()


async def test_readme_quick_start_runs_and_runs_again(server, sql):
    for _ in range(2):  # a newcomer runs it twice: the queue is there the second time
        assert await asyncio.to_thread(run_quick_start, server.target) == "sending welcome to ada@example.com - attempt 1"
        assert sql.execute("SELECT count(*) FROM welcome_emails").fetchone() == (0,)  # acked


def runnable_sections() -> list[str]:
    """The README's `## ` sections with a ```python or ```console block, in order."""
    text = README.read_text()
    found = []
    for match in re.finditer(r"^## ([^\n]+)\n(.*?)(?=^## |\Z)", text, re.S | re.M):
        if re.search(r"^```(?:python|console)\n", match.group(2), re.M):
            found.append(match.group(1))
    return found


async def test_the_readme_runs_top_to_bottom_in_one_database(server, server_config, clock, database_url, sql):
    """Every block as written, in order, in ONE database: no section's queue or table collides with an
    earlier one's (the CLI's and grpcurl's queues were both `tasks`, the quick start's and psql's both
    `emails`). The UNKNOWN_COMMIT section asks for a server that loses every commit's answer: it gets one,
    on the same database, as `SPANQ_INJECT_FAULTS=... make run` would be."""
    assert runnable_sections() == [QUICK_START, *SESSIONS]
    assert await asyncio.to_thread(run_quick_start, server.target) == "sending welcome to ada@example.com - attempt 1"
    for title in SESSIONS:
        if title != UNKNOWN_COMMIT:
            await replay(title, server.target, database_url)
            continue
        faulty = await start(dataclasses.replace(server_config, inject_faults="unknown_commit_after=1"), clock=clock)
        try:
            async with grpc.aio.insecure_channel(faulty.target) as channel:  # the queue its prose asks for
                await create_queue(queue_pb2_grpc.QueueServiceStub(channel), "payments", payload_type=queue_pb2.JSON)
            await replay(title, faulty.target, database_url)
        finally:
            await faulty.stop(0)
    queues = {row[0] for row in sql.execute("SELECT name FROM spanq.queues")}
    assert queues == {"welcome_emails", "work", "failed", "jobs", "tasks", "payments", "emails"}
    assert sql.execute("SELECT id, receipts_sent FROM orders").fetchall() == [(1, 1)]
