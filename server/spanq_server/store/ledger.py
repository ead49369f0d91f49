"""The commit ledger's table (spanq.commit_ledger): claims, recorded responses,
look-ups and pruning. What the entries mean is exactly_once.py's to say."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..ground.model import LedgeredAck, LedgeredSend
from ..sql.compose import query
from .arrays import array_literal, bytea_array_literal
from .database import Database, Handle, connection_of


class LedgerTable(Database):
    """spanq.commit_ledger."""

    async def ledger_claim(self, handle: Handle, request_id: str, fingerprint: bytes, now: datetime | None) -> bool:
        """True if this transaction now owns request_id; False if a committed one has it."""
        cur = await connection_of(handle).execute(
            query("ledger_claim"), {"request_id": request_id, "fingerprint": fingerprint, "now": now}
        )
        return await cur.fetchone() is not None

    async def ledger_record(self, handle: Handle, request_id: str, response: bytes) -> None:
        await connection_of(handle).execute(query("ledger_record"), {"request_id": request_id, "response": response})

    async def ledger_lookup(self, request_id: str) -> tuple[bytes, bytes] | None:
        """(fingerprint, response) of a committed request_id, or None."""
        async with self._read() as conn:
            cur = await conn.execute(query("ledger_lookup"), {"request_id": request_id})
            row = await cur.fetchone()
        return (bytes(row[0]), bytes(row[1])) if row else None

    async def ledger_prune(self, retention: timedelta, now: datetime | None, batch_size: int = 1000) -> int:
        """Deletes one batch of expired entries; returns how many."""
        async with self._read() as conn:
            cur = await conn.execute(
                query("ledger_prune"), {"retention": retention, "now": now, "batch_size": batch_size}
            )
            return cur.rowcount


def claim_params(requests: Sequence[LedgeredSend | LedgeredAck], rows: Sequence[int]) -> dict[str, Any]:
    """A group statement's commit-ledger arrays: each request's id, fingerprint and
    response, and the owning request_id of each of its ``rows`` (messages sent or
    acked). Array literals, not lists (see arrays.py)."""
    return dict(
        request_ids=array_literal([r.request_id for r in requests]),
        fingerprints=bytea_array_literal([r.fingerprint for r in requests]),
        responses=bytea_array_literal([r.response for r in requests]),
        owners=array_literal([r.request_id for r, n in zip(requests, rows) for _ in range(n)]),
    )
