"""Exactly-once processing: the effect and the ack commit together, so a crash can only undo both.

    python examples/exactly_once.py --target localhost:50051 --database-url postgresql://... [--payments 300]

Payments arrive on a queue; a consumer adds each to an account's balance in the application's tables. A
queue delivers at least once (a worker may die after its work and before its ack; a lease may lapse), so a
consumer that acks after committing its work applies some payments twice. Here the consumer's transaction
does the work AND the ack (``spanq.sql.ack``: a DELETE of the message's row, in the same PostgreSQL
transaction):

- it commits: the balance changed and the message is gone, together;
- it dies or fails before COMMIT: neither happened, and the message is redelivered once its lease ends;
- another delivery of the same payment committed first: the ack deletes no row, raises MessageGone and
  aborts the transaction, so its writes roll back and the payment is not applied twice.

The story: send the payments (through whatever faults the server injects: the SDK replays each send's
request id, so every message is stored once), start a worker process, SIGKILL it part-way, start another,
and check the ledger: each balance is the sum of its payments, and ``ledger_applied``, which deliberately
has no unique constraint on the payment, holds each payment exactly once. Run the server with
``--inject-faults unknown_commit_after=0.3,unknown_commit_before=0.3`` to see the retries at work. Each run
starts from empty tables and an empty queue.

``--worker`` runs just the consumer (it exits once the queue is empty).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import psycopg_pool

import spanq

QUEUE = "ledger_payments"
ACCOUNTS = ("alice", "bob", "carol", "dave")
LEASE = 2.0
"""Seconds: a killed worker's messages are redelivered this long after its last renewal."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_accounts (
    account text PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0
);
-- One row per application of a payment. No unique constraint on payment_id, on purpose: it is the
-- consumer's transaction, not a constraint, that keeps each payment to one row, and a second row would show.
CREATE TABLE IF NOT EXISTS ledger_applied (
    seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id       bigint NOT NULL,
    account          text NOT NULL REFERENCES ledger_accounts (account),
    amount           bigint NOT NULL,
    delivery_attempt int NOT NULL,
    worker_pid       int NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT now()
);
"""


def setup(client: spanq.Client, conn: psycopg.Connection[Any]) -> None:
    """Creates the queue and the tables if need be, then empties them (the accounts back to 0)."""
    try:
        client.create_queue(QUEUE, key_columns=[("payment_id", "INT64")], payload_type="JSON",
                            lease_duration=LEASE, initial_backoff=0)
    except spanq.AlreadyExists:
        pass
    with conn.transaction():
        conn.execute(SCHEMA)
        conn.execute(f"DELETE FROM {QUEUE}")  # a queue is a table
        conn.execute("TRUNCATE ledger_applied")
        conn.execute("DELETE FROM ledger_accounts")
        conn.execute("INSERT INTO ledger_accounts (account) SELECT unnest(%s::text[])", (list(ACCOUNTS),))


def payments(n: int) -> list[tuple[int, str, int]]:
    """``n`` payments: (payment id, account, amount in cents)."""
    return [(i, ACCOUNTS[i % len(ACCOUNTS)], 1 + (i * 7919) % 500) for i in range(1, n + 1)]


def send_payments(client: spanq.Client, n: int, batch: int = 25) -> dict[str, int]:
    """Sends ``n`` payments, ``batch`` per Send; returns the balances they must add up to."""
    expected = dict.fromkeys(ACCOUNTS, 0)
    todo = payments(n)
    for start in range(0, n, batch):
        chunk = todo[start:start + batch]
        # One request id per send_many, replayed on UNKNOWN_COMMIT or UNAVAILABLE: stored once, never twice.
        client.send_many(QUEUE, [spanq.OutgoingMessage({"account": a, "amount": amount}, key=pid)
                                 for pid, a, amount in chunk])
        for _, account, amount in chunk:
            expected[account] += amount
    return expected


# -- the consumer ---------------------------------------------------------------------------------------


def worker(target: str, database_url: str, *, work_seconds: float = 0.01, threads: int = 4) -> int:
    """Consumes the payments queue until it is empty; returns how many payments this process applied."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    pid = os.getpid()

    with spanq.Client(target) as client, psycopg_pool.ConnectionPool(
            database_url, min_size=1, max_size=threads, kwargs={"autocommit": True}, open=True) as pool:

        def apply(message: spanq.Message) -> None:  # runs on one of the subscriber's threads
            payment = message.payload
            try:
                with pool.connection() as conn, conn.transaction():
                    conn.execute("UPDATE ledger_accounts SET balance = balance + %s WHERE account = %s",
                                 (payment["amount"], payment["account"]))
                    conn.execute("INSERT INTO ledger_applied (payment_id, account, amount, delivery_attempt, worker_pid) "
                                 "VALUES (%s, %s, %s, %s, %s)",
                                 (message.key[0], payment["account"], payment["amount"], message.delivery_attempt, pid))
                    time.sleep(work_seconds)  # the rest of the work: a kill lands inside a transaction
                    spanq.sql.ack(conn, QUEUE, message)  # the ack commits with the balance, or not at all
            except spanq.MessageGone:  # another delivery applied it and acked it first; our writes rolled back
                with lock:
                    counts["skipped"] += 1
                return
            with lock:
                counts["applied"] += 1
                counts["redelivered"] += message.delivery_attempt > 1

        print(f"worker {pid}: consuming {QUEUE}", flush=True)
        flow = spanq.FlowControl(max_messages=4 * threads)
        with client.subscribe(QUEUE, apply, flow_control=flow, max_workers=threads), \
                psycopg.connect(database_url, autocommit=True) as conn:
            while _remaining(conn):
                time.sleep(0.1)
    print(f"worker {pid}: applied {counts['applied']} payments ({counts['redelivered']} of them redelivered), "
          f"{counts['skipped']} skipped as already applied; the queue is empty", flush=True)
    return counts["applied"]


def worker_command(target: str, database_url: str) -> list[str]:
    """The command line that runs a consumer process."""
    return [sys.executable, os.path.abspath(__file__), "--target", target, "--database-url", database_url, "--worker"]


# -- checking -------------------------------------------------------------------------------------------


def kill_while_holding(pid: int, conn: psycopg.Connection[Any]) -> int:
    """SIGKILLs the worker ``pid`` at a moment it holds leased messages; returns how many it held.

    The worker is frozen (SIGSTOP) while its leases are counted, so the count is the one it dies with."""
    deadline = time.monotonic() + 30
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker {pid} held no leased message in 30 s")
        os.kill(pid, signal.SIGSTOP)
        held = leased_count(conn)
        if held:
            os.kill(pid, signal.SIGKILL)
            return held
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.005)


def _remaining(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(f"SELECT count(*) FROM {QUEUE}").fetchone()
    return int(row[0]) if row else 0


def applied_count(conn: psycopg.Connection[Any]) -> int:
    """Rows in ledger_applied."""
    row = conn.execute("SELECT count(*) FROM ledger_applied").fetchone()
    return int(row[0]) if row else 0


def leased_count(conn: psycopg.Connection[Any]) -> int:
    """Messages whose lease is live: held by a worker right now."""
    row = conn.execute(f"SELECT count(*) FROM {QUEUE} WHERE spanq_lease_expiration_timestamp > now()").fetchone()
    return int(row[0]) if row else 0


@dataclasses.dataclass(frozen=True)
class Ledger:
    """The ledger's state, checked against the payments sent."""

    balances: dict[str, int]
    applied: Counter[int]
    """payment id -> how many times it was applied."""
    queued: set[int]
    """Payment ids still in the queue."""
    redelivered: int
    """Payments applied on a delivery after the first."""
    workers: Counter[int]
    """Payments applied per worker process id."""

    def consistent(self, n: int) -> bool:
        """Every payment is applied once or still queued, never both, never neither, never twice; and each
        balance is the sum of the payments applied to it. True at every moment, not only at the end."""
        return (max(self.applied.values(), default=1) == 1 and not (self.queued & set(self.applied))
                and self.queued | set(self.applied) == set(range(1, n + 1))
                and self.balances == self._sums(n, set(self.applied)))

    def exactly_once(self, n: int) -> bool:
        """Every payment applied exactly once, nothing left in the queue."""
        return self.consistent(n) and not self.queued and self.balances == self._sums(n, set(range(1, n + 1)))

    @staticmethod
    def _sums(n: int, ids: set[int]) -> dict[str, int]:
        sums = dict.fromkeys(ACCOUNTS, 0)
        for pid, account, amount in payments(n):
            if pid in ids:
                sums[account] += amount
        return sums


def ledger(conn: psycopg.Connection[Any]) -> Ledger:
    """Reads the ledger and the queue, in one snapshot (``conn`` in autocommit mode)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        balances = dict(conn.execute("SELECT account, balance FROM ledger_accounts").fetchall())
        rows = conn.execute("SELECT payment_id, delivery_attempt, worker_pid FROM ledger_applied").fetchall()
        queued = {r[0] for r in conn.execute(f"SELECT payment_id FROM {QUEUE}")}
    return Ledger(balances, Counter(r[0] for r in rows), queued, sum(r[1] > 1 for r in rows),
                  Counter(r[2] for r in rows))


# -- the story --------------------------------------------------------------------------------------------


def story(target: str, database_url: str, n: int) -> bool:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # in order with the workers' lines
    with spanq.Client(target) as client, psycopg.connect(database_url, autocommit=True) as conn:
        setup(client, conn)
        expected = send_payments(client, n)
        print(f"sent {n} payments to {len(ACCOUNTS)} accounts; the queue holds {_remaining(conn)} messages")

    with psycopg.connect(database_url, autocommit=True) as conn:
        first = subprocess.Popen(worker_command(target, database_url))
        deadline = time.monotonic() + 60
        while applied_count(conn) < n // 3 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        held = kill_while_holding(first.pid, conn)
        first.wait()
        print(f"killed worker {first.pid} with SIGKILL after {applied_count(conn)} payments were applied, while "
              f"it held {held} leased messages")
        midway = ledger(conn)
        print(f"  right after the kill: {'consistent' if midway.consistent(n) else 'INCONSISTENT'} "
              f"({len(midway.applied)} applied, {len(midway.queued)} still queued, none both or neither)")

        second = subprocess.Popen(worker_command(target, database_url))
        second.wait(timeout=120)
        final = ledger(conn)

    shown = ", ".join(f"{a} {final.balances[a]} (expected {expected[a]})" for a in ACCOUNTS)
    print(f"balances: {shown}")
    ok = final.exactly_once(n) and final.balances == expected
    print(f"{sum(final.applied.values())} applications of {n} payments, {len(final.applied)} distinct, "
          f"{final.redelivered} on a redelivery: {'every payment applied exactly once' if ok else 'NOT EXACTLY ONCE'}")
    return ok


def main(argv: list[str] | None = None) -> None:
    from local_database import local_database_url  # beside this script, on its sys.path

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--target", default="localhost:50051", help="the spanq server, host:port")
    url = local_database_url()
    parser.add_argument("--database-url", default=url, required=url is None,
                        help="the PostgreSQL database the server uses (default: $DATABASE_URL, else the "
                             "embedded PostgreSQL of `make run`, as `spanq psql --print-url` prints it)")
    parser.add_argument("--payments", type=int, default=300, help="how many payments to send")
    parser.add_argument("--worker", action="store_true", help="only consume the queue, until it is empty")
    args = parser.parse_args(argv)
    if args.worker:
        logging.basicConfig(level=os.environ.get("SPANQ_LOG_LEVEL", "WARNING"),
                            format=f"worker {os.getpid()} %(asctime)s %(name)s %(levelname)s: %(message)s")
        worker(args.target, args.database_url)
    elif not story(args.target, args.database_url, args.payments):
        sys.exit(1)


if __name__ == "__main__":
    main()
