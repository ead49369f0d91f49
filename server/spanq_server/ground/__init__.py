"""The ground: plain values, errors, time, settings, and the rules every layer checks
(a name, a JSON value). It imports nothing of the server."""
