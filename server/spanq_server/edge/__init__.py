"""The shared gRPC edge of both front-ends: interceptors (timing, decoding, auth), the
status table (domain errors -> gRPC status), and the wire values (codec, views)."""
