"""The /metrics HTTP endpoint, at a bounded cost however often it is scraped.

prometheus_client's own server renders the registry for every request, each in a
thread of its own: the per-queue gauges' statement then runs once per scrape, and
every scraping thread takes its share of the GIL from the event loop (40 threads
scraping took Send's median from 4 ms to 565 ms). Here one thread serves every
request, one after another, and the registry is rendered at most once per
interval: a scrape in between gets the copy. And it answers at most one request per
MIN_SPACING. A scrape storm thus costs the service one render per interval plus one
thread copying bytes to sockets a hundred times a second.
"""

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

CLIENT_TIMEOUT = 5.0
"""Seconds a scraper may take to send its request; the next one waits meanwhile."""


MIN_SPACING = 0.01
"""Seconds from one request's start to the next's: at most 100 scrapes a second (the copy
alone, served flat out, took a third of the GIL and doubled Send's median)."""


class _Spaced(WSGIServer):
    def process_request(self, request: Any, client_address: Any) -> None:
        started = time.monotonic()
        super().process_request(request, client_address)
        time.sleep(max(0.0, MIN_SPACING - (time.monotonic() - started)))  # the GIL is free meanwhile


class _Quiet(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape on stderr would drown the server's own logs


class Endpoint:
    """Serves ``registry`` at /metrics from one thread. ``start()`` binds and returns
    the port; ``stop()`` is idempotent."""

    def __init__(self, registry: Collector, interval: float) -> None:
        self._registry = registry
        self._interval = interval
        self._copies: dict[str, tuple[float, bytes]] = {}
        """Content type -> (when rendered, time.monotonic(); the body)."""
        self._http: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        """The bound port, once started."""

    def copy(self, accept: str | None = None) -> tuple[bytes, str]:
        """The body and content type for an Accept header: rendered now if the last copy
        of that type is an interval old, else that copy. Only the serving thread calls it."""
        encoder, content_type = choose_encoder(accept or "")
        cached = self._copies.get(content_type)
        if cached is not None and time.monotonic() - cached[0] < self._interval:
            return cached[1], content_type
        body = encoder(self._registry)
        # Timed from the end: a slow render (a slow database) is not followed by another at once.
        self._copies[content_type] = (time.monotonic(), body)
        return body, content_type

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"spanq serves its metrics at /metrics\n"]
        body, content_type = self.copy(environ.get("HTTP_ACCEPT"))
        start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    def start(self, host: str, port: int) -> int:
        """Binds host:port (port 0: any free port) and serves from a daemon thread."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("_Server", (_Spaced,), {"address_family": family})
        self._http = make_server(host, port, self._app, server_class, handler_class=_Quiet)
        self._thread = threading.Thread(target=self._http.serve_forever, name="spanq-metrics", daemon=True)
        self._thread.start()
        self.port = int(self._http.server_port)
        return self.port

    def stop(self) -> None:
        """Stops serving and closes the socket; blocks up to half a second (the serving
        thread's poll), so async callers run it in a thread."""
        http, self._http = self._http, None
        if http is None:
            return
        http.shutdown()
        http.server_close()
