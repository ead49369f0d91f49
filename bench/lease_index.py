"""What the lease-token index costs a lease: ``python -m bench.lease_index [--runs 5] [--messages 20000]``.

One table shaped like a spanq queue (a text key, a payload, deliver_time with
its index, the lease token, expiry and attempt columns), leased 100 messages
per statement with ``FOR UPDATE SKIP LOCKED`` and acked by a DELETE by key
checked against the token, in plain SQL from psycopg (durable commits, one
connection), in three layouts, alternated run by run:

- ``token index``: tokens ``<prefix>.<lease end>.<random>`` with a unique
  index on the token (spanq before migration 0010);
- ``key in token``: tokens ``<prefix>.<lease end>.<key>~<random>`` that carry
  their key, and the partial token index of migration 0010, which holds only
  tokens without the key (none here): what spanq does now;
- ``no token index``: no index on the token at all (the floor).

The ack's token check is spanq's (``a.token IS NULL OR m.lease_token =
a.token``, message_ack): a plain ``m.lease_token = a.token`` lets the planner
find the rows through the token index where there is one, and hash-join a
scan of the table where there is none, which made the ack look 0.2 ms slower
without the index; spanq's acks never use the token index.

Each run preloads the messages into one table per layout and vacuums, then
drains the tables side by side, a batch of each in turn with the order
rotating, so that load from elsewhere on the machine falls on all layouts
alike. Prints the medians over runs of each run's median ms per lease and
per ack, and the loop's messages/s from their sum.
"""

import argparse
import os
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

BATCH = 100

KEY_IN_TOKEN = (
    "'s.' || (extract(epoch FROM now() + interval '60 s') * 1000000)::bigint || '.'"
    " || replace(replace(replace(replace(m.id, '%%', '%%25'), '.', '%%2E'), '~', '%%7E'), ',', '%%2C')"
    " || '~' || replace(gen_random_uuid()::text, '-', '')"
)
PLAIN_TOKEN = (
    "'s.' || (extract(epoch FROM now() + interval '60 s') * 1000000)::bigint || '.'"
    " || replace(gen_random_uuid()::text, '-', '')"
)
LAYOUTS: dict[str, tuple[str, str | None]] = {
    "token index": (PLAIN_TOKEN, "CREATE UNIQUE INDEX ON {t} (lease_token) WHERE lease_token IS NOT NULL"),
    "key in token": (KEY_IN_TOKEN, "CREATE UNIQUE INDEX ON {t} (lease_token) WHERE lease_token IS NOT NULL"
                                   " AND substr(lease_token, length(lease_token) - 32, 1) <> '~'"),
    "no token index": (PLAIN_TOKEN, None),
}


def table(layout: str) -> sql.Identifier:
    return sql.Identifier("public", "bench_lease_index_" + layout.replace(" ", "_"))


def setup(conn: psycopg.Connection[Any], t: sql.Identifier, index: str | None, n: int) -> None:
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {t}").format(t=t))
    conn.execute(sql.SQL("""
        CREATE TABLE {t} (
            id            text COLLATE "C" PRIMARY KEY,
            payload       text NOT NULL,
            deliver_time  timestamptz NOT NULL,
            lease_token   text COLLATE "C",
            lease_expires timestamptz,
            attempt       integer NOT NULL DEFAULT 0,
            enqueue_time  timestamptz NOT NULL DEFAULT now())""").format(t=t))
    conn.execute(sql.SQL("CREATE INDEX ON {t} (deliver_time)").format(t=t))
    if index:
        conn.execute(sql.SQL(index).format(t=t))  # type: ignore[arg-type]  # our own constants
    conn.execute(sql.SQL("""
        INSERT INTO {t} (id, payload, deliver_time)
        SELECT gen_random_uuid()::text, repeat('x', 100), now() - (%(n)s - g) * interval '1 microsecond'
        FROM generate_series(1, %(n)s) AS g""").format(t=t), {"n": n})
    conn.execute(sql.SQL("VACUUM (ANALYZE) {t}").format(t=t))


def statements(t: sql.Identifier, token: str) -> tuple[sql.Composed, sql.Composed]:
    lease = sql.SQL("""
        UPDATE {t} AS m SET
            lease_token = {token},
            lease_expires = now() + interval '60 s',
            deliver_time = now() + interval '60 s',
            attempt = m.attempt + 1
        FROM (SELECT id FROM {t} WHERE deliver_time <= now() ORDER BY deliver_time
              LIMIT %(n)s FOR UPDATE SKIP LOCKED) AS r
        WHERE m.id = r.id
        RETURNING m.id, m.lease_token""").format(t=t, token=sql.SQL(token))  # type: ignore[arg-type]
    ack = sql.SQL("""
        DELETE FROM {t} AS m USING unnest(%(ids)s::text[], %(tokens)s::text[]) AS a(id, token)
        WHERE m.id = a.id AND (a.token IS NULL OR m.lease_token = a.token)""").format(t=t)
    return lease, ack


def one_run(conn: psycopg.Connection[Any], run: int, n: int) -> dict[str, tuple[float, float]]:
    """All layouts drained side by side, a batch of each in turn (the order rotating), so
    that load from elsewhere falls on all of them alike: median ms per lease and per ack."""
    names = list(LAYOUTS)
    steps = {name: statements(table(name), LAYOUTS[name][0]) for name in names}
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}
    for i in range(n // BATCH):
        shift = (i + run) % len(names)
        for name in names[shift:] + names[:shift]:
            lease, ack = steps[name]
            t0 = time.perf_counter()
            rows = conn.execute(lease, {"n": BATCH}, prepare=True).fetchall()
            t1 = time.perf_counter()
            conn.execute(ack, {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows]}, prepare=True)
            t2 = time.perf_counter()
            times[name][0].append((t1 - t0) * 1000)
            times[name][1].append((t2 - t1) * 1000)
    return {name: (statistics.median(ls), statistics.median(acks)) for name, (ls, acks) in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in LAYOUTS}
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'}, {args.messages} messages, {BATCH} per lease, "
              f"{args.runs} runs, the layouts' batches interleaved")
        for run in range(args.runs):
            for name, (_, index) in LAYOUTS.items():
                setup(conn, table(name), index, args.messages)
            for name, figures in one_run(conn, run, args.messages).items():
                results[name].append(figures)
                print(f"  run {run + 1} {name:15} lease {figures[0]:.3f} ms  ack {figures[1]:.3f} ms")
        for name in LAYOUTS:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {t}").format(t=table(name)))
    base = statistics.median(r[0] + r[1] for r in results["token index"])
    print("layout           lease ms  ack ms  lease+ack ms  msgs/s  vs token index")
    for name, runs in results.items():
        lease_ms = statistics.median(r[0] for r in runs)
        ack_ms = statistics.median(r[1] for r in runs)
        both = statistics.median(r[0] + r[1] for r in runs)
        print(f"{name:15} {lease_ms:9.3f} {ack_ms:7.3f} {both:13.3f} {BATCH / both * 1000:7,.0f}  "
              f"{base / both:.3f}x")


if __name__ == "__main__":
    main()
