"""The stream roster's table (spanq.stream_roster): each server's open Receive
streams, published with a heartbeat, for a consumers list across servers. What
goes in a row and when is domain/receive/roster.py's to say."""

from datetime import timedelta
from typing import Any

from psycopg.types.json import Jsonb

from ..ground.model import ReportedStream
from ..sql.compose import query
from .database import Database


class RosterTable(Database):
    """spanq.stream_roster."""

    async def roster_publish(self, instance: str, server: str, streams: list[dict[str, Any]],
                             stale_after: timedelta) -> None:
        """Writes this server's row (its heartbeat now) and deletes the stale rows of others."""
        async with self._read() as conn:
            await conn.execute(query("roster_publish"), {"instance": instance, "server": server,
                                                         "streams": Jsonb(streams), "stale_after": stale_after})

    async def roster_withdraw(self, instance: str) -> None:
        async with self._read() as conn:
            await conn.execute(query("roster_withdraw"), {"instance": instance})

    async def roster_streams(self, instance: str, queue: str, stale_after: timedelta) -> list[ReportedStream]:
        """The queue's streams on every other live server."""
        async with self._read() as conn:
            cur = await conn.execute(query("roster_streams"),
                                     {"instance": instance, "queue": queue, "stale_after": stale_after})
            return [ReportedStream(server, stream, ago) for server, stream, ago in await cur.fetchall()]

    async def roster_counts(self, instance: str, stale_after: timedelta) -> dict[str, int]:
        """Open streams per queue on every other live server."""
        async with self._read() as conn:
            cur = await conn.execute(query("roster_counts"), {"instance": instance, "stale_after": stale_after})
            return {queue: count for queue, count in await cur.fetchall()}
