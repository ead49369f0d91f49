"""The gRPC side of the Spanner front-end, as Google's emulator keeps ``frontend/handlers``
apart from ``backend/query``: protobuf in, domain and query engine calls, protobuf out.

- ``servicers``: the four services (Spanner, InstanceAdmin, DatabaseAdmin, Operations);
- ``sessions``: resource names and (stateless) sessions;
- ``transactions``: transaction ids, open read-write transactions, the reaper;
- ``admin``: instances, databases (each its own namespace) and long-running operations;
- ``status``: the domain's errors as Spanner's status codes;
- ``access``: what each method and each parsed statement needs of a token.

They import the query engine (``..query``); it never imports them.
"""
