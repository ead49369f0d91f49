"""Prometheus metrics, in three parts in three layers, depending on each other one way only:

- ``metrics.counters`` (here, below the domain): what the domain counts as it happens
  (sends, acks, nacks, deliveries) and the send and ack rates (``metrics.rates``). The
  domain (mutations, receive, wakeups) calls it; it imports prometheus_client's metric
  types and nothing of gRPC or HTTP.
- ``edge.timing``: the gRPC interceptor that times every RPC (``spanq_rpc_duration_seconds``).
- ``scrape.endpoint``: /metrics: what a scrape computes (the queue gauges from the
  database, streams, the pool), the --workers multiprocess files, and the HTTP server
  (``scrape.exposition``) that renders them at most once per interval.

Every running server has its own registry (not prometheus_client's global one), so
several servers in one process do not clash; server.py makes it and hands it to all
three. Named after Spanner's queue metrics (``spanner.googleapis.com/queue/*``);
docs/operations.md describes each one.

This file imports nothing: importing ``metrics.counters`` must not bring in the others.
"""
