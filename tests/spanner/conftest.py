"""The Spanner front-end (google.spanner.v1 on the spanq port), through Google's own client
and its messages, against a real server and PostgreSQL."""

from ..servers import await_idle_streams, channel, server, server_config, stub, waiting  # noqa: F401  (fixtures)
