"""A loopback TCP proxy in front of PostgreSQL that a test can cut, for real
network faults: connections dropped at a chosen moment, not simulated errors.

``cut_at_commit("after")`` arms the proxy: the next COMMIT a client sends is
forwarded to PostgreSQL (so it commits) and the connection is then dropped
before the answer returns. ``cut_at_commit("before")`` drops the connection
instead of forwarding the COMMIT (PostgreSQL rolls back). Either way the
client cannot know the outcome. A statement that commits by itself (autocommit)
is cut the same way by naming it: ``cut_at_commit(mode, GROUP_STATEMENT)``.
"""

import asyncio
import contextlib
import struct
from typing import Literal

from psycopg.conninfo import conninfo_to_dict, make_conninfo

Mode = Literal["before", "after"]
COMMIT_QUERY = b"Q" + struct.pack("!i", 4 + len(b"COMMIT\x00")) + b"COMMIT\x00"
GROUP_STATEMENT = b"INSERT INTO spanq.commit_ledger"
"""Part of the server's group-commit statements for Send and Ack (claims + inserts
or deletes, each its own transaction), as their text crosses the wire the first
times a connection runs them."""


class PgProxy:
    def __init__(self, upstream_url: str) -> None:
        params = conninfo_to_dict(upstream_url)
        self.upstream_url = upstream_url
        self._host = str(params.get("host") or "localhost")
        self._port = int(params.get("port") or 5432)
        self._server: asyncio.base_events.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._muting: dict[tuple[asyncio.StreamWriter, asyncio.StreamWriter], asyncio.Event] = {}
        self._armed: Mode | None = None
        self._marker = COMMIT_QUERY
        self.commits_cut = 0
        self.port = 0

    @property
    def url(self) -> str:
        """The upstream URL, rerouted through this proxy."""
        return make_conninfo(self.upstream_url, host="127.0.0.1", port=str(self.port))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and cut every open connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.cut_all()

    def cut_all(self) -> None:
        for client, upstream in list(self._links):
            client.transport.abort()
            upstream.transport.abort()
        self._links.clear()

    def mute_all(self) -> None:
        """From now on, what PostgreSQL sends on the open connections is dropped, silently:
        a network that loses packets, without an error on either side."""
        for muted in self._muting.values():
            muted.set()

    def cut_at_commit(self, mode: Mode, marker: bytes = COMMIT_QUERY) -> None:
        """Arms the cut for the next client message that contains marker."""
        self._armed, self._marker = mode, marker

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._host.startswith("/"):
            return await asyncio.open_unix_connection(f"{self._host}/.s.PGSQL.{self._port}")
        return await asyncio.open_connection(self._host, self._port)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await self._open_upstream()
        except OSError:
            client_writer.transport.abort()
            return
        link = (client_writer, up_writer)
        self._links.add(link)
        cut = asyncio.Event()
        muted = self._muting[link] = asyncio.Event()
        upward = asyncio.create_task(self._pump(client_reader, up_writer, cut, inspect=True))
        downward = asyncio.create_task(self._pump(up_reader, client_writer, cut, inspect=False, muted=muted))
        try:
            await asyncio.wait([upward, downward], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the proxy is stopping
        finally:
            for task in (upward, downward):
                task.cancel()
            client_writer.transport.abort()
            up_writer.transport.abort()
            self._links.discard(link)
            self._muting.pop(link, None)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event,
                    inspect: bool, muted: asyncio.Event | None = None) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while not cut.is_set():
                data = await reader.read(65536)
                if not data or cut.is_set():
                    return  # once cut, nothing more crosses: PostgreSQL's answer is lost
                if muted is not None and muted.is_set():
                    continue
                if inspect and self._armed and self._marker in data:
                    mode, self._armed = self._armed, None
                    self.commits_cut += 1
                    cut.set()
                    if mode == "after":
                        writer.write(data)
                        await writer.drain()
                        # Let PostgreSQL commit before the connection drops (the proxy cannot see
                        # the commit land; a client's answer would never come: that is the fault).
                        await asyncio.sleep(0.2)
                    return
                writer.write(data)
                await writer.drain()
