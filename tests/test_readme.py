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


async def test_readme_quick_start_runs(server, sql):
    code = quick_start().replace("localhost:50051", server.target)
    out = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})

    await asyncio.to_thread(run)
    assert out.getvalue().strip() == "sending welcome to ada@example.com - attempt 1"
    assert sql.execute("SELECT count(*) FROM emails").fetchone() == (0,)  # acked
