"""Which way the dependencies point, checked in a fresh interpreter (no PostgreSQL):
the domain counts without gRPC, and the server takes the generated stubs from their
own package (spanq_proto), not from the SDK."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def imported_after(*modules: str) -> set[str]:
    """The names in sys.modules of a fresh interpreter once it has imported ``modules``."""
    script = f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n" \
             "print(json.dumps(sorted(sys.modules)))"
    path = os.pathsep.join([str(ROOT / "server"), str(ROOT / "client"), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": path},
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return set(json.loads(out))


def test_the_domain_and_its_counters_import_no_grpc():
    """metrics/counters.py is what the domain calls: it, the commit path and the receive
    stream bring in neither gRPC, nor protobuf, nor the SDK, nor the RPC timing or the
    /metrics endpoint."""
    loaded = imported_after("spanq_server.metrics.counters", "spanq_server.domain.mutations", "spanq_server.domain.receive.stream")
    assert loaded & {"grpc", "spanq", "spanq_server.edge.timing", "spanq_server.scrape.endpoint",
                     "spanq_server.scrape.exposition"} == set()
    assert not {m for m in loaded if m.startswith(("google.protobuf", "spanq_proto"))}


def test_the_server_imports_the_stubs_not_the_sdk():
    loaded = imported_after("spanq_server.server", "spanq_server.workers")
    assert {"spanq_proto.v1.queue_pb2", "spanq_proto.v1.queue_pb2_grpc"} <= loaded
    assert "spanq" not in loaded
