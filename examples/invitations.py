"""Workspace invitations: a retry repeats the intent, it never duplicates the result.

    python examples/invitations.py --target localhost:50051 --database-url postgresql://...

(``--database-url`` is the PostgreSQL database the server uses; it defaults to ``$DATABASE_URL``, else to
the embedded PostgreSQL that ``make run`` started.)

Someone invites a colleague to a workspace. The request may come twice (a double click, a client timeout
and retry, two tabs), typed differently each time ("Alice@Example.com" and "  alice@example.COM "), and the
e-mail provider fails now and then. What must hold:

- One member per business key: the workspace plus the e-mail trimmed and lower-cased, under a UNIQUE
  constraint. The database, not an application check, settles two concurrent first attempts.
- The member row and the "send the invite e-mail" message commit together: ``spanq.sql.send`` inside the
  application's own psycopg transaction (the transactional outbox). There is never a member whose e-mail
  was not queued, nor an e-mail for a member that was rolled back.
- The e-mail worker (a spanq subscriber) calls the provider and records the outcome in its own table,
  ``invite_deliveries`` (pending / sent / failed), apart from the member; the outcome and the message's ack
  commit together (``spanq.sql.ack``).
- A retry returns the same member. It queues the e-mail again only when the last delivery failed; while one
  is pending or after it was sent there is nothing to repeat.

The e-mail message's key is (member_id, send number), and the worker hands that key to the provider as its
idempotency key: if a worker dies after the provider accepted an e-mail but before the outcome committed,
the redelivered message carries the same key and the provider does not send it twice.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
import uuid
from typing import Any

import psycopg

import spanq
import spanq.aio

QUEUE = "invite_emails"

SCHEMA = """
CREATE TABLE IF NOT EXISTS members (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace  text NOT NULL,
    email      text NOT NULL,       -- normalised: trimmed and lower-cased
    entered_as text NOT NULL,       -- as the inviter typed it the first time
    invited_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT members_business_key UNIQUE (workspace, email)
);
CREATE TABLE IF NOT EXISTS invite_deliveries (
    member_id      bigint PRIMARY KEY REFERENCES members (id),
    state          text NOT NULL CHECK (state IN ('pending', 'sent', 'failed')),
    sends          int NOT NULL DEFAULT 1,   -- invite e-mails queued: the first, plus one per retry after a failure
    provider_calls int NOT NULL DEFAULT 0,
    last_error     text,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
"""


def normalise_email(email: str) -> str:
    """The business key's e-mail: trimmed and lower-cased."""
    address = email.strip().lower()
    if address.count("@") != 1 or address.startswith("@") or address.endswith("@"):
        raise ValueError(f"not an e-mail address: {email!r}")
    return address


async def setup(client: spanq.aio.Client, conn: psycopg.AsyncConnection[Any]) -> None:
    """Creates the tables and the e-mail queue (both kept if they exist)."""
    await conn.execute(SCHEMA)
    try:
        await client.create_queue(QUEUE, key_columns=[("member_id", "INT64"), ("send", "INT64")],
                                  payload_type="JSON", lease_duration=30)
    except spanq.AlreadyExists:
        pass


# -- the application: inviting ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Invitation:
    """What one call of ``invite`` did."""

    member_id: int
    created: bool
    """This call created the member (False: it already existed)."""
    email_queued: bool
    """This call queued an invite e-mail (the first, or again after a failed delivery)."""
    delivery: str
    """The delivery state once this call committed: pending, sent or failed."""


async def invite(conn: psycopg.AsyncConnection[Any], workspace: str, email: str) -> Invitation:
    """Invites ``email`` to ``workspace``: safe to call again with the same intent, in any case or spacing.

    ``conn`` is an autocommit connection that this call uses for one transaction."""
    address = normalise_email(email)
    async with conn.transaction():
        cursor = await conn.execute(
            "INSERT INTO members (workspace, email, entered_as) VALUES (%s, %s, %s) "
            "ON CONFLICT ON CONSTRAINT members_business_key DO NOTHING RETURNING id",
            (workspace, address, email),
        )
        row = await cursor.fetchone()
        if row is not None:  # the first attempt: the member, its delivery and its e-mail, in one commit
            member_id = row[0]
            await conn.execute("INSERT INTO invite_deliveries (member_id, state) VALUES (%s, 'pending')",
                               (member_id,))
            await _queue_email(conn, member_id, 1, workspace, address)
            return Invitation(member_id, created=True, email_queued=True, delivery="pending")

        # A repeat (or a concurrent first attempt that committed while this INSERT waited on the unique key).
        cursor = await conn.execute(
            "SELECT m.id, d.state, d.sends FROM members m JOIN invite_deliveries d ON d.member_id = m.id "
            "WHERE m.workspace = %s AND m.email = %s FOR UPDATE OF d",
            (workspace, address),
        )
        found = await cursor.fetchone()
        assert found is not None, "the conflicting member is committed, so it is visible"
        member_id, state, sends = found
        if state != "failed":  # on its way, or delivered: there is nothing to repeat
            return Invitation(member_id, created=False, email_queued=False, delivery=state)
        await conn.execute(
            "UPDATE invite_deliveries SET state = 'pending', sends = sends + 1, last_error = NULL, updated_at = now() "
            "WHERE member_id = %s",
            (member_id,),
        )
        await _queue_email(conn, member_id, sends + 1, workspace, address)
        return Invitation(member_id, created=False, email_queued=True, delivery="pending")


async def _queue_email(conn: psycopg.AsyncConnection[Any], member_id: int, send: int, workspace: str,
                       address: str) -> None:
    # The transactional outbox: an INSERT into the queue's table, in the caller's transaction.
    await spanq.sql.send(conn, QUEUE, (member_id, send),
                         {"to": address, "workspace": workspace, "template": "workspace-invitation"})


@dataclasses.dataclass(frozen=True)
class Delivery:
    """A member's invite e-mail, as the worker recorded it."""

    state: str
    sends: int
    provider_calls: int
    last_error: str | None


async def delivery(conn: psycopg.AsyncConnection[Any], member_id: int) -> Delivery:
    """The delivery state of a member's invite e-mail."""
    cursor = await conn.execute(
        "SELECT state, sends, provider_calls, last_error FROM invite_deliveries WHERE member_id = %s", (member_id,))
    row = await cursor.fetchone()
    if row is None:
        raise LookupError(f"no member {member_id}")
    return Delivery(*row)


async def wait_for_delivery(conn: psycopg.AsyncConnection[Any], member_id: int, timeout: float = 10.0) -> Delivery:
    """Waits until the member's invite e-mail is no longer pending; returns its delivery."""
    deadline = time.monotonic() + timeout
    while True:
        found = await delivery(conn, member_id)
        if found.state != "pending":
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"member {member_id}'s invite e-mail is still pending after {timeout:g}s")
        await asyncio.sleep(0.02)


# -- the e-mail worker ----------------------------------------------------------------------------------


class ProviderError(Exception):
    """The e-mail provider did not accept the e-mail."""


class FlakyProvider:
    """A stand-in for an e-mail provider's HTTP API: the first ``failures`` calls fail.

    Like real providers it takes an idempotency key, and accepts each key once."""

    def __init__(self, failures: int = 1) -> None:
        self.failures = failures
        self.calls: list[tuple[str, str]] = []
        """(recipient, idempotency key) of every call, in order."""
        self.accepted: dict[str, str] = {}
        """Idempotency key -> recipient of every e-mail accepted for sending."""

    async def send(self, *, to: str, template: str, idempotency_key: str) -> None:
        self.calls.append((to, idempotency_key))
        await asyncio.sleep(0.01)  # the HTTP round trip
        if len(self.calls) <= self.failures:
            raise ProviderError("503 from the provider: try again later")
        self.accepted.setdefault(idempotency_key, to)


class EmailWorker:
    """Delivers invite e-mails: a subscriber on the e-mail queue.

    Each message: call the provider, then record the outcome in ``invite_deliveries`` and ack the message in
    ONE transaction. A failed call is recorded as ``failed`` and the message let go: the next ``invite`` of
    that address queues the e-mail again. (A worker that should retry by itself would raise instead: the
    subscriber nacks, and the queue redelivers after its backoff.)
    """

    def __init__(self, client: spanq.aio.Client, database_url: str, provider: FlakyProvider,
                 log: Any = None) -> None:
        self._client = client
        self._url = database_url
        self.provider = provider
        self._log = log or (lambda line: None)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()  # one connection: one transaction at a time
        self._subscription: spanq.aio.Subscription | None = None

    async def __aenter__(self) -> EmailWorker:
        self._conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
        self._subscription = self._client.subscribe(QUEUE, self._deliver, flow_control=spanq.FlowControl(max_messages=10))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            await self._subscription.result()
        if self._conn is not None:
            await self._conn.close()

    async def _deliver(self, message: spanq.Message) -> None:
        member_id, send = message.key
        assert isinstance(member_id, int) and isinstance(send, int)  # the key columns are INT64
        idempotency_key = f"invite-{member_id}-{send}"
        try:
            await self.provider.send(to=message.payload["to"], template=message.payload["template"],
                                     idempotency_key=idempotency_key)
            state, error = "sent", None
        except ProviderError as exc:
            state, error = "failed", str(exc)
        self._log(f"  worker: provider call {len(self.provider.calls)} for member {member_id} "
                  f"({message.payload['to']}, key {idempotency_key}): {state}{f' ({error})' if error else ''}")
        assert self._conn is not None
        async with self._lock, self._conn.transaction():
            await self._conn.execute(
                "UPDATE invite_deliveries SET state = %s, provider_calls = provider_calls + 1, last_error = %s, "
                "updated_at = now() WHERE member_id = %s",
                (state, error, member_id),
            )
            await spanq.sql.ack(self._conn, QUEUE, message)  # commits with the outcome, or not at all


# -- the story --------------------------------------------------------------------------------------------


async def story(target: str, database_url: str, workspace: str) -> None:
    async with spanq.aio.Client(target) as client, \
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await setup(client, conn)
        provider = FlakyProvider(failures=1)
        async with EmailWorker(client, database_url, provider, log=print):
            first = await invite(conn, workspace, "Alice@Example.com")
            print(f"invite 'Alice@Example.com' to {workspace}: member {first.member_id}, "
                  f"created={first.created}, e-mail queued={first.email_queued}")
            result = await wait_for_delivery(conn, first.member_id)
            print(f"  delivery: {result.state} ({result.last_error})")

            retry = await invite(conn, workspace, "  ALICE@example.COM ")
            print(f"retry '  ALICE@example.COM ': member {retry.member_id}, created={retry.created}, "
                  f"e-mail queued={retry.email_queued}")
            result = await wait_for_delivery(conn, retry.member_id)
            print(f"  delivery: {result.state} after {result.provider_calls} provider calls")

            again = await invite(conn, workspace, "alice@example.com")
            print(f"once more after it was sent: member {again.member_id}, created={again.created}, "
                  f"e-mail queued={again.email_queued}, delivery {again.delivery}")

            variants = ["Bob@Example.com", " bob@example.com", "BOB@EXAMPLE.COM ", "bob@Example.Com"]
            connections = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in variants]
            try:
                results = await asyncio.gather(*(invite(c, workspace, v) for c, v in zip(connections, variants)))
            finally:
                for c in connections:
                    await c.close()
            created = sum(r.created for r in results)
            print(f"{len(variants)} concurrent first invites of bob: member ids {sorted({r.member_id for r in results})}, "
                  f"{created} created, {sum(r.email_queued for r in results)} e-mail queued")
            result = await wait_for_delivery(conn, results[0].member_id)
            print(f"  delivery: {result.state}")

        cursor = await conn.execute("SELECT count(*) FROM members WHERE workspace = %s", (workspace,))
        row = await cursor.fetchone()
        print(f"members of {workspace}: {row[0] if row else 0}; provider calls: {len(provider.calls)}; "
              f"e-mails accepted by the provider: {len(provider.accepted)}")


def main(argv: list[str] | None = None) -> None:
    from local_database import local_database_url  # beside this script, on its sys.path

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--target", default="localhost:50051", help="the spanq server, host:port")
    url = local_database_url()
    parser.add_argument("--database-url", default=url, required=url is None,
                        help="the PostgreSQL database the server uses (default: $DATABASE_URL, else the "
                             "embedded PostgreSQL of `make run`, as `spanq psql --print-url` prints it)")
    parser.add_argument("--workspace", default=None, help="the workspace to invite to (default: a new one)")
    args = parser.parse_args(argv)
    asyncio.run(story(args.target, args.database_url, args.workspace or f"acme-{uuid.uuid4().hex[:6]}"))


if __name__ == "__main__":
    main()
