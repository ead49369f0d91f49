"""The README's Python quick start runs as printed, against a real server."""

import asyncio
import contextlib
import io
import re

from .readme_session import README


def quick_start() -> str:
    section = README.read_text().split("## Quick start (Python)", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


async def test_readme_quick_start_runs_and_runs_again(server, sql):
    code = quick_start().replace("localhost:50051", server.target)

    def run() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
        return out.getvalue().strip()

    for _ in range(2):  # a newcomer runs it twice: the queue is there the second time
        assert await asyncio.to_thread(run) == "sending welcome to ada@example.com - attempt 1"
        assert sql.execute("SELECT count(*) FROM emails").fetchone() == (0,)  # acked
