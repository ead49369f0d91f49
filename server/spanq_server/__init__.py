"""spanq_server: the spanq gRPC service on PostgreSQL.

`pip install spanq` is the SDK alone; the server's own dependencies are the `server` extra.
The `spanq` command's client side (cli/__init__.py, cli/admin.py) needs only the SDK, so
importing this package checks nothing: importing the server (server.py) does, through
server_extra.py."""
