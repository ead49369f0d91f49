"""spanq_server: the spanq gRPC service on PostgreSQL.

`pip install spanq` is the SDK alone; the server's own dependencies are the `server` extra.
The `spanq` command's client side (cli.py's dispatch, admin_cli.py) needs only the SDK, so
importing this package checks nothing: importing the server (server.py) does, through
server_extra.py."""
