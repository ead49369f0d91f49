"""spanq: Spanner's queues on PostgreSQL. The Python SDK."""
