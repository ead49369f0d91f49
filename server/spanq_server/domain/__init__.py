"""The domain: queue rules, mutations and exactly once, the operator's tools, and the
Receive stream (receive/). No gRPC, no protobuf, no psycopg, no front-end."""
