"""Which way the dependencies point. The server's layers (docs/architecture.md) are
import-linter contracts in pyproject.toml ([tool.importlinter]): run here, so that
`make test` keeps them. What a static import graph cannot say is checked in a fresh
interpreter (no PostgreSQL): what importing the server loads."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATH = os.pathsep.join([str(ROOT / "server"), str(ROOT / "client"), os.environ.get("PYTHONPATH", "")])


def test_the_layers_hold():
    """Every contract: imports point down the layers, no cycle between the folders of a
    layer, the domain imports no gRPC, protobuf, psycopg or front-end, the store only the
    ground and sql/, a front-end never the store."""
    run = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                          "sys.exit(lint_imports_command())", "--no-cache", "--config", str(ROOT / "pyproject.toml")],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": PATH}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[run.stdout.find("Contracts"):] + run.stderr


def imported_after(*modules: str) -> set[str]:
    """The names in sys.modules of a fresh interpreter once it has imported ``modules``."""
    script = f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n" \
             "print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": PATH},
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return set(json.loads(out))


def test_the_server_imports_the_stubs_not_the_sdk():
    """The SDK is imported only by the client commands, lazily (cli.py), which a static
    graph cannot tell from an import at start: serving loads the stubs, not the SDK."""
    loaded = imported_after("spanq_server.server", "spanq_server.workers")
    assert {"spanq_proto.v1.queue_pb2", "spanq_proto.v1.queue_pb2_grpc"} <= loaded
    assert "spanq" not in loaded
