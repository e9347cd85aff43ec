"""Bounds on every wait of a `PostgresStore` on its server: its connections' options, a watchdog.

A server that accepts a connection and never answers, or one frozen mid-run
(a partition, a stopped host), would keep a psycopg call waiting forever: libpq
waits for an answer as long as the server's host acknowledges what it sends.
Every connection is made with a connect timeout and TCP keepalives
(`connection_options`, which a URL's own query parameters override), runs
with a server-side ``statement_timeout``, and each statement runs under a
`Watchdog`: a statement the server has not answered in time has its connection
cut (its socket shut down), so the thread waiting on it gets an error at once
(`StoreUnavailable`, as for any dropped connection) instead of waiting on.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Watchdog", "close_writer", "connection_options"]

#: How often the watchdog looks at the statements under way, in seconds (at most).
_TICK = 0.1


def connection_options(
    url: str, *, connect_timeout: float, statement_limit: float
) -> dict[str, Any]:
    """The psycopg connection options for a store's connections (the URL's own ones win).

    Args:
        url: The store's URL; a parameter its query sets is left to it.
        connect_timeout: How long to wait for a connection, in seconds (libpq
            counts whole seconds, two at least).
        statement_limit: The watchdog's limit: unacknowledged data is given up
            after it (``tcp_user_timeout``), and keepalives find a silent peer
            in about as long.
    """
    given = {key.lower() for key, _ in urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)}
    idle = max(1, math.ceil(statement_limit / 3))
    options: dict[str, Any] = {
        "connect_timeout": max(2, math.ceil(connect_timeout)),
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": idle,
        "keepalives_count": 3,
        "tcp_user_timeout": math.ceil(statement_limit * 1000),
    }
    return {key: value for key, value in options.items() if key not in given}


class Watchdog:
    """Cuts the connection of a statement its server has not answered within ``limit`` seconds.

    `watching` marks a statement under way on the calling thread; a daemon thread
    (started with the first one, stopped by `stop`) shuts down the socket of
    each one past its deadline, which ends psycopg's wait with an error.
    `cut_all` cuts every one under way now (a store leaving a frozen server).
    """

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._running: dict[int, tuple[float, Any]] = {}
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        #: How many connections it cut.
        self.cut = 0

    @contextlib.contextmanager
    def watching(self, connection: Any) -> Iterator[None]:
        """Watch one statement on ``connection``, run by the calling thread."""
        key = threading.get_ident()
        with self._lock:
            self._running[key] = (time.monotonic() + self.limit, connection)
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._main, name="arkhon-store-watchdog", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(key, None)

    def cut_all(self) -> None:
        """Cut the connection of every statement under way now."""
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for _, connection in running:
            self._cut(connection)

    def stop(self) -> None:
        """Stop the watchdog's thread (statements run after it are not watched)."""
        self._stopped.set()

    def _main(self) -> None:
        while not self._stopped.wait(min(_TICK, self.limit / 4)):
            now = time.monotonic()
            with self._lock:
                late = [key for key, (deadline, _) in self._running.items() if deadline <= now]
                overdue = [self._running.pop(key)[1] for key in late]
            for connection in overdue:
                self._cut(connection)

    def _cut(self, connection: Any) -> None:
        """Shut ``connection``'s socket down: its waits end, with an error, at once."""
        try:
            fd = connection.pgconn.socket
        except Exception:  # closed already: nothing waits on it
            return
        self.cut += 1  # before the waiting thread wakes: it tells a cut from a drop by this
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            self.cut -= 1


async def close_writer(writer: Any, stall: float) -> bool:
    """Close a store's ``writer``, waiting while its queue moves; whether its thread stopped.

    The wait goes on as long as requests land (or are refused), and ends once
    none has for ``stall`` seconds: a server that answers nothing (frozen, or
    partitioned away) is not waited on for the statement limit, while a busy one
    that commits a long queue is.
    """
    left = writer.queued
    while not await writer.aclose(timeout=stall):
        if writer.queued >= left:
            return False
        left = writer.queued
    return True
