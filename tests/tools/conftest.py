"""What people run: the spanq command, the README as printed, the examples, the dashboard
in a browser, the SDK's own install, grpcurl, against a real server and PostgreSQL."""

from ..servers import channel, server, server_config, stub, waiting  # noqa: F401  (fixtures)
