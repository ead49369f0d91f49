"""A small HTTP/1.1 server on the event loop, for the dashboard: one request per
connection (Connection: close), bounded headers and bodies, a response either whole
or streamed line by line (redrive progress). The standard library's asyncio only:
the dashboard's handlers call the domain's coroutines directly, which a WSGI server
in a thread (metrics/exposition.py's) could do only by hopping back onto the loop."""

import asyncio
import dataclasses
import ipaddress
import json
import logging
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

logger = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024
READ_TIMEOUT = 10.0
"""Seconds a client may take to send its request."""

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 421: "Misdirected Request",
           429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable",
           504: "Gateway Timeout"}
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    # Only the package's own files: no inline script, nothing from elsewhere, never framed.
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
)


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    """Lowercase names."""
    body: bytes
    peer: str = ""
    """The client's address, for the refusal log."""

    def json(self) -> dict[str, Any]:
        """The body, a JSON object ({} when empty)."""
        if not self.body:
            return {}
        try:
            data = json.loads(self.body)
        except ValueError:
            raise HttpError(400, "the request body is not JSON") from None
        except RecursionError:
            raise HttpError(400, "the request body is JSON nested too deep") from None
        if not isinstance(data, dict):
            what = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(data), "a number")
            raise HttpError(400, f'the request body must be a JSON object, not {what}: e.g. {{}} or {{"to": "QUEUE"}}')
        return data


@dataclasses.dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    stream: AsyncIterator[bytes] | None = None
    """Written chunk by chunk instead of body (no Content-Length)."""
    cache: bool = False


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def json_response(data: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(data, separators=(",", ":")).encode())


Handler = Callable[[Request], Awaitable[Response]]
HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::(?P<port>[0-9]{1,5}))?",
                  re.ASCII | re.IGNORECASE)


def split_host(text: str) -> tuple[str, int | None] | None:
    """A Host header's name and port, or a --ui-allowed-hosts entry's: the name in lowercase
    (an IPv6 address in its short form, with or without brackets); None when it is not a
    DNS name or an IP address, with a port or not."""
    text = text.strip()
    if text.count(":") > 1 and not text.startswith("["):
        text = f"[{text}]"  # a bare IPv6 address
    found = HOST.fullmatch(text)
    if found is None:
        return None
    name = found["name"] or found["v6"]
    if found["v6"]:
        try:
            name = ipaddress.IPv6Address(found["v6"]).compressed
        except ValueError:
            return None
    return name.lower(), int(found["port"]) if found["port"] else None


class HttpServer:
    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> int:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        self._server = await asyncio.start_server(self._serve, host, port, family=family, ssl=tls,
                                                  limit=MAX_HEAD, reuse_address=True)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._tasks):  # a redrive's progress stream, a slow client
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                request = await asyncio.wait_for(_read(reader), READ_TIMEOUT)
                peer = writer.get_extra_info("peername")
                request.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
                response = await self._handler(request)
            except HttpError as exc:
                response = json_response({"error": str(exc)}, exc.status)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return
            except Exception:
                logger.exception("dashboard: unexpected error")
                response = json_response({"error": "internal error; the server logged it"}, 500)
            await _write(writer, response)
        except (ConnectionError, ssl.SSLError):
            pass  # the browser went away
        except Exception:
            logger.exception("dashboard: unexpected error")
        finally:
            self._tasks.discard(task)
            writer.close()


async def _read(reader: asyncio.StreamReader) -> Request:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(400, f"request headers over {MAX_HEAD} bytes") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "not an HTTP/1.x request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length", "0")
    if not (length.isascii() and length.isdigit()):  # str.isdigit() takes '²', which int() refuses
        raise HttpError(400, "Content-Length is not a number")
    if int(length) > MAX_BODY:
        raise HttpError(413, f"request body over {MAX_BODY} bytes")
    body = await reader.readexactly(int(length)) if int(length) else b""
    try:
        url = urlsplit(parts[1])
    except ValueError:  # "//[x": an unclosed IPv6 authority
        raise HttpError(400, "the request's path is not a URL path") from None
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    return Request(parts[0], unquote(url.path), query, headers, body)


async def _write(writer: asyncio.StreamWriter, response: Response) -> None:
    head = [f"HTTP/1.1 {response.status} {REASONS.get(response.status, 'Status')}",
            f"Content-Type: {response.content_type}", "Connection: close",
            "Cache-Control: " + ("max-age=300" if response.cache else "no-store")]
    head += [f"{k}: {v}" for k, v in SECURITY_HEADERS]
    if response.stream is None:
        head.append(f"Content-Length: {len(response.body)}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if response.stream is None:
        writer.write(response.body)
        await writer.drain()
        return
    async for chunk in response.stream:
        writer.write(chunk)
        await writer.drain()
