"""spanq_server: the spanq gRPC service on PostgreSQL."""

import importlib.util

# `pip install spanq` is the SDK alone; the server's own dependencies are the `server` extra.
_missing = [name for name in ("psycopg", "psycopg_pool", "prometheus_client", "grpc_health", "grpc_reflection")
            if importlib.util.find_spec(name) is None]
if _missing:
    raise ModuleNotFoundError(
        f"the spanq server needs {', '.join(_missing)}, which are not installed: pip install 'spanq[server]' "
        "(pip install spanq is the SDK alone)", name=_missing[0]
    )
