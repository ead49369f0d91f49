"""``spanq serve --workers N``: N server processes on one port.

A Python process serves gRPC on one core at a time (the GIL), so a server that
should use more cores runs more processes. The supervisor (the process ``spanq``
was started as) serves no gRPC itself:

- it reserves the port (resolving port 0 once) and holds it while children come
  and go; each child binds it again with SO_REUSEPORT, and the kernel spreads
  new connections over the children;
- it applies migrations once, then starts the children, each with its share of
  --max-connections, and restarts one that dies, after a backoff;
- on SIGTERM or SIGINT it asks every child to shut down gracefully (SIGTERM),
  and kills one that has not finished in time;
- it serves the one /metrics endpoint: the children write their counters to
  prometheus_client's multiprocess files, and the per-queue gauges are computed
  here, once for all.

A child is ``python -c _CHILD``: its Config arrives pickled on stdin, which then
stays open as its lifeline (EOF: the supervisor is gone, the child shuts down);
it writes one byte to an inherited pipe once it serves.
"""

import asyncio
import dataclasses
import logging
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

from .ground.clock import Clock
from .ground.config import LOG_FORMAT, Config, ConfigError
from .scrape.endpoint import parse_listen, serve_files
from .store import Store

logger = logging.getLogger(__name__)

RESTART_DELAY = 0.5
"""Seconds before a dead child is started again, doubled for each death in a row."""
RESTART_DELAY_MAX = 30.0
"""Seconds: the longest wait before a restart."""
STABLE_AFTER = 30.0
"""Seconds a child must have served for its death to count as the first in a row."""
KILL_AFTER = 5.0
"""Seconds past a child's own shutdown (up to three grace periods: streams, commits,
leases given back) after which the supervisor kills it."""
_CHILD = "from spanq_server.workers import child_main; child_main()"


def connections_per_worker(config: Config) -> list[int]:
    """Each child's max_connections: the total less the supervisor's own, split evenly."""
    total = config.max_connections - supervisor_connections(config)
    base, extra = divmod(total, config.workers)
    return [base + (1 if i < extra else 0) for i in range(config.workers)]


def supervisor_connections(config: Config) -> int:
    """One connection for the queue gauges when the supervisor serves metrics, else none
    (it migrates on one at start-up, then closes it)."""
    return 1 if parse_listen(config.metrics_listen) is not None else 0


def reserve(listen: str) -> tuple[str, list[socket.socket]]:
    """Binds listen's addresses (port 0: a free port, chosen once) with SO_REUSEPORT,
    without listening: the children can bind the port too, nobody else can, and no
    connection is queued here. Returns the address the children are given."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ConfigError(f"--listen {listen!r} is not HOST:PORT")
    port = int(port_text)
    held: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            # First a plain bind, refused if any process holds the port: a bind with
            # SO_REUSEPORT would silently join another server's group on it.
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT, as gRPC does
                probe.bind((address[0], port, *address[2:]))
                port = probe.getsockname()[1]
            sock = socket.socket(family, kind, proto)
            held.append(sock)
            # SO_REUSEADDR as well, as gRPC sets it: else the TIME_WAIT of a previous server's
            # connections refuses the port for a minute. (While no child listens, a socket with
            # SO_REUSEADDR could then bind it too; a plain one cannot.)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((address[0], port, *address[2:]))
    except OSError as exc:
        for sock in held:
            sock.close()
        raise ConfigError(f"cannot serve on {listen}: {exc.strerror or exc}; give --listen another HOST:PORT") from exc
    return f"{host}:{port}", held


class Supervisor:
    """Runs the children until SIGTERM or SIGINT. ``run()`` returns the exit status."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.listen = config.listen
        self._stopping = asyncio.Event()
        self._children: dict[int, asyncio.subprocess.Process] = {}
        self._files = ""
        """prometheus_client's multiprocess directory: the children's metrics (made by run())."""

    def _child_config(self, index: int) -> Config:
        share = connections_per_worker(self.config)[index]
        return dataclasses.replace(self.config, workers=1, worker=True, listen=self.listen, metrics_listen="off",
                                   ui_listen=self.config.ui_listen if index == 0 else "off",  # one dashboard
                                   max_connections=share, pool_min_size=min(self.config.pool_min_size, share - 1))

    async def _start(self, index: int) -> asyncio.subprocess.Process:
        """Starts child ``index`` and returns once it serves, has died, or we are stopping."""
        ready_r, ready_w = os.pipe()
        try:
            # A new session: a terminal's Ctrl-C reaches the supervisor alone, which stops the
            # children in order (a child that stopped by itself first would be restarted).
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _CHILD, str(ready_w), str(index),
                stdin=asyncio.subprocess.PIPE, pass_fds=(ready_w,), start_new_session=True,
                env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": self._files},
            )
        except BaseException:
            os.close(ready_r)
            raise
        finally:
            os.close(ready_w)
        self._children[index] = process
        assert process.stdin is not None
        process.stdin.write(pickle.dumps((self._child_config(index), logging.getLogger().level)))
        await process.stdin.drain()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[bytes] = loop.create_future()  # the pipe is readable: the child wrote, or died (EOF)

        def readable() -> None:
            if not ready.done():
                ready.set_result(os.read(ready_r, 1))

        loop.add_reader(ready_r, readable)
        exited: asyncio.Future[Any] = asyncio.ensure_future(process.wait())
        stopping: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait([ready, exited, stopping], return_when=asyncio.FIRST_COMPLETED)
            if ready.done() and ready.result() == b"" and not stopping.done():
                # EOF before its byte: the child died while starting. Reap it, so that its
                # returncode says so (else it would be taken for a child that serves).
                await exited
        finally:
            loop.remove_reader(ready_r)
            os.close(ready_r)
            for waiting in (ready, exited, stopping):
                waiting.cancel()
        return process

    async def _keep(self, index: int, process: asyncio.subprocess.Process) -> None:
        """Restarts child ``index`` whenever it dies, until we are stopping."""
        delay = RESTART_DELAY
        while True:
            served_from = time.monotonic()
            code = await process.wait()
            if self._stopping.is_set():
                return
            mark_process_dead(process.pid, self._files)  # its gauges leave the sums; its counters stay
            if time.monotonic() - served_from >= STABLE_AFTER:
                delay = RESTART_DELAY
            logger.warning("worker %d (pid %d) exited with status %s; starting it again in %.1f s",
                           index, process.pid, code, delay)
            try:
                await asyncio.wait_for(self._stopping.wait(), delay)
                return
            except TimeoutError:
                pass
            delay = min(delay * 2, RESTART_DELAY_MAX)
            process = await self._start(index)
            if process.returncode is None:
                logger.info("worker %d started again (pid %d)", index, process.pid)

    async def _stop_children(self) -> None:
        live = [p for p in self._children.values() if p.returncode is None]
        if not live:
            return
        for process in live:
            process.send_signal(signal.SIGTERM)
        timeout = 3 * self.config.shutdown_grace.total_seconds() + KILL_AFTER
        done, pending = await asyncio.wait([asyncio.ensure_future(p.wait()) for p in live], timeout=timeout)
        if pending:
            logger.warning("%d worker(s) still running %.0f s after SIGTERM: killing them", len(pending), timeout)
            for process in live:
                if process.returncode is None:
                    process.kill()
            await asyncio.wait(pending)

    async def run(self) -> int:
        from .server import check

        config = self.config
        assert config.database_url is not None
        check(config)
        self.listen, held = reserve(config.listen)
        self._files = tempfile.mkdtemp(prefix="spanq-metrics-")
        store = Store(config.database_url, min_size=1, max_size=1)
        endpoint = None
        keepers: list[asyncio.Task[None]] = []
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stopping.set)
        try:
            await store.open()
            applied = await store.migrate()  # once, before the children (which then find nothing to do)
            if applied:
                logger.info("applied migrations %s", applied)
            endpoint = serve_files(config.metrics_listen, interval=config.metrics_interval.total_seconds(),
                                   queue_gauges=store.queue_gauges, clock=Clock(), path=self._files)
            if endpoint is None:
                await store.close()
            processes = await asyncio.gather(*(self._start(i) for i in range(config.workers)))
            if self._stopping.is_set():
                return 0
            failed = [i for i, p in enumerate(processes) if p.returncode is not None]
            if failed:
                logger.error("worker(s) %s exited while starting (status %s); see their errors above",
                             failed, [processes[i].returncode for i in failed])
                return 1
            port = int(self.listen.rsplit(":", 1)[1])
            logger.info("spanq serving on %s (port %d) with %d workers (pids %s)", config.listen, port,
                        config.workers, ", ".join(str(p.pid) for p in processes))
            if endpoint is not None:
                logger.info("metrics of all workers at http://%s/metrics (port %d)", config.metrics_listen,
                            endpoint.port)
            keepers = [asyncio.create_task(self._keep(i, p), name=f"worker-{i}") for i, p in enumerate(processes)]
            await self._stopping.wait()
            logger.info("shutting down %d workers", config.workers)
            return 0
        finally:
            self._stopping.set()
            for task in keepers:  # first: none may start a child after the others are told to stop
                task.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            await self._stop_children()
            if endpoint is not None:
                await asyncio.to_thread(endpoint.stop)
            await store.close()
            for sock in held:
                sock.close()
            shutil.rmtree(self._files, ignore_errors=True)


async def supervise(config: Config) -> int:
    return await Supervisor(config).run()


def child_main() -> None:
    """A child's entry: ``python -c _CHILD READY_FD INDEX``, its Config pickled on stdin."""
    from .server import serve

    ready_fd, index = int(sys.argv[1]), sys.argv[2]
    config, level = pickle.load(sys.stdin.buffer)
    logging.basicConfig(level=level, format=LOG_FORMAT.replace(" logger=", f" worker={index} logger="),
                        stream=sys.stderr)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def orphaned() -> None:  # stdin readable: at EOF, the supervisor is gone
            loop.remove_reader(sys.stdin.fileno())
            logger.warning("the supervisor is gone: shutting down")
            stop.set()

        loop.add_reader(sys.stdin.fileno(), orphaned)

        def started(_: object) -> None:
            os.write(ready_fd, b"r")
            os.close(ready_fd)

        await serve(config, stop=stop, started=started)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except ConfigError as exc:
        sys.exit(f"spanq worker {index}: {exc}")
