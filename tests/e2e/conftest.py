"""End to end over a real server: the spanq.v1 API, the SDK and psql users against a real
gRPC server on a real socket (in the test's process, or spawned) and PostgreSQL."""

from ..servers import await_idle_streams, channel, server, server_config, stub, waiting  # noqa: F401  (fixtures)
