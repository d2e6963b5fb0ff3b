"""Connections to PostgreSQL for the messaging store, and the one boundary where
psycopg's exceptions become ``StorageUnavailableError``.

* ``translated(what, where)``: a context in which every ``psycopg.Error`` is raised again
  as ``StorageUnavailableError`` (``raise ... from``), naming what was being done and
  the database (never its password);
* ``Connections``: a small pool of autocommit connections for reads. A connection is
  taken for one call (or one scan) and given back only when it is idle and healthy —
  one that broke, or is still inside a transaction, is closed instead. After ``close``
  nothing is handed out, and connections given back are closed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg.pq import TransactionStatus

from tms.errors import StorageUnavailableError
from tms.store.postgres.arrays import register

__all__ = ["Connections", "connect", "translated"]


@contextlib.contextmanager
def translated(what: str, where: str) -> Iterator[None]:
    """The boundary: psycopg's errors become ``StorageUnavailableError``."""
    try:
        yield
    except psycopg.Error as exc:
        raise StorageUnavailableError(f"PostgreSQL: cannot {what} in {where}: {exc}") from exc


def connect(
    url: str, name: str, *, isolation: IsolationLevel | None = None, timeout_s: float = 10.0
) -> psycopg.Connection[Any]:
    """A new autocommit connection (``psycopg.Error`` when it cannot be made)."""
    conn = psycopg.connect(
        url, autocommit=True, application_name=name, connect_timeout=max(1, int(timeout_s))
    )
    register(conn.adapters)  # the write statements' encoded arrays
    if isolation is not None:
        conn.isolation_level = isolation  # of the transactions opened by ``transaction()``
    return conn


class Connections:
    """See the module docstring. Thread-safe."""

    def __init__(self, url: str, name: str, *, max_idle: int = 8, timeout_s: float = 10.0) -> None:
        self._url = url
        self._name = name
        self._max_idle = max_idle
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection[Any]] = []
        self._closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one call: autocommit, and ``transaction()`` opens a
        REPEATABLE READ, READ ONLY transaction (one snapshot for a whole scan). Raises
        ``psycopg.Error`` when none can be made, ``StorageUnavailableError`` once
        closed."""
        with self._lock:
            if self._closed:
                raise StorageUnavailableError("the store is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(
                self._url,
                self._name,
                isolation=IsolationLevel.REPEATABLE_READ,
                timeout_s=self._timeout_s,
            )
            conn.read_only = True
        try:
            yield conn
        finally:
            self._give_back(conn)

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        healthy = (
            not conn.closed
            and not conn.broken
            and conn.info.transaction_status == TransactionStatus.IDLE
        )
        with self._lock:
            if healthy and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        with contextlib.suppress(psycopg.Error):
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(psycopg.Error):
                conn.close()
