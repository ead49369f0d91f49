"""spanq benchmarks: every figure next to the same workload done in plain SQL.

Run ``python -m bench`` (``make bench``) for the full table, ``python -m bench
--quick`` (``make bench-quick``) for the same table with smaller sizes. See
docs/benchmarks.md for the recorded figures and what each cell measures.
Benchmarks print; they never assert.
"""
