"""spanq_server: the spanq gRPC service on PostgreSQL."""
