"""The long-running Receive: the stream loop (stream.py), what a stream holds
(held.py), streams that let leases lapse (lapses.py), and wake-ups."""
