"""The /metrics front-end: what a Prometheus scrape computes, and its HTTP server."""
