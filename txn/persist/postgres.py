"""State storage in PostgreSQL, shared by the servers of a highly available deployment,
with fencing.

Tables (created on first use)::

    txn_leader(id = 1, epoch, holder, since)    who may write: the current epoch
    txn_snapshot(ts, data)                      one row per snapshot
    txn_log(ts, epoch)                          one row per log
    txn_log_chunk(ts, seq, epoch, data)         a log's bytes, one row per sync

Contract (see ``txn.persist.storage.StateStorage`` for the rest):

* ``open()`` takes a **new epoch**: the ``txn_leader`` row's epoch is incremented and
  this storage writes under that number from then on. Whoever opens later deposes it.
* **Fencing**: every change — a log's bytes, a new log, a snapshot, a deletion, a
  truncation — is made only if the writer's epoch is still the current one, checked in
  the same database transaction as the change (the ``txn_leader`` row is read ``FOR
  SHARE``, which a newer ``open()``'s update of that row waits for, and vice versa).
  A stale writer gets ``FencedError`` and nothing is changed. So once a newer
  ``open()`` has committed, a deposed server can never add another edit, whatever its
  clock or its ZooKeeper session says.
* A log writer's ``write`` only buffers; ``sync`` sends everything buffered since the
  last sync as one chunk in one single-statement transaction (fence included): one
  round trip and one PostgreSQL commit per flushed batch, so group commit is kept.
  A sync that fails, or whose answer is lost, fails the log (the chunk may or may not
  be stored: nothing was acknowledged, and recovery reads whatever committed).
* Chunks commit whole, so a log read back never has a torn tail of ours;
  ``truncate_log`` still cuts chunks for the generic recovery code.
* ``fileno()`` is None: there is no local file, so a server syncs through ``sync``
  (the Python write-ahead log pipeline), never through a helper holding a descriptor.

This module is the boundary where psycopg's exceptions become ``TxStorageError``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg

from txms_common.pgurl import redact
from txn.errors import FencedError, TxStorageError

__all__ = ["PostgresStorage"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS txn_leader (
    id     integer PRIMARY KEY CHECK (id = 1),
    epoch  bigint NOT NULL,
    holder text NOT NULL,
    since  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS txn_snapshot (
    ts   bigint PRIMARY KEY,
    data bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS txn_log (
    ts    bigint PRIMARY KEY,
    epoch bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS txn_log_chunk (
    ts    bigint NOT NULL REFERENCES txn_log (ts) ON DELETE CASCADE,
    seq   integer NOT NULL,
    epoch bigint NOT NULL,
    data  bytea NOT NULL,
    PRIMARY KEY (ts, seq)
);
"""
_SCHEMA_LOCK = 0x7478_6E5F_7363_6800  # pg_advisory_xact_lock key: "txn_sch"
_FENCE = "WITH fence AS (SELECT 1 FROM txn_leader WHERE id = 1 AND epoch = %(epoch)s FOR SHARE) "
_APPEND = (
    _FENCE + "INSERT INTO txn_log_chunk (ts, seq, epoch, data) "
    "SELECT %(ts)s, %(seq)s, %(epoch)s, %(data)s FROM fence"
)
_CREATE_LOG = _FENCE + "INSERT INTO txn_log (ts, epoch) SELECT %(ts)s, %(epoch)s FROM fence"
_TAKE_EPOCH = """
INSERT INTO txn_leader (id, epoch, holder) VALUES (1, 1, %s)
ON CONFLICT (id) DO UPDATE
    SET epoch = txn_leader.epoch + 1, holder = EXCLUDED.holder, since = now()
RETURNING epoch
"""


class _Conn:
    """One autocommit connection, used by one thread at a time, reopened after it broke."""

    def __init__(self, url: str, name: str) -> None:
        self._url = url
        self._name = name
        self._conn: psycopg.Connection[Any] | None = None
        self.lock = threading.Lock()

    def get(self) -> psycopg.Connection[Any]:
        """The connection (call with ``lock`` held)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(
                self._url, autocommit=True, application_name=self._name, connect_timeout=10
            )
        return self._conn

    def close(self) -> None:
        with self.lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                with contextlib.suppress(psycopg.Error):
                    conn.close()


class _PgLog:
    """A log whose ``write`` buffers and whose ``sync`` stores one fenced chunk."""

    def __init__(self, owner: PostgresStorage, timestamp_ms: int) -> None:
        self._owner = owner
        self._ts = timestamp_ms
        self._buffer: list[bytes] = []
        self._seq = 0
        self._closed = False
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._closed:
                raise TxStorageError(f"log {self._ts} is closed")
            self._buffer.append(bytes(data))

    def sync(self) -> None:
        with self._lock:
            if self._closed:
                raise TxStorageError(f"log {self._ts} is closed")
            if not self._buffer:
                return
            data = b"".join(self._buffer)
            # One statement, one transaction: the fence and the chunk commit together.
            self._owner.fenced_insert(
                self._owner.log_conn,
                _APPEND,
                {"ts": self._ts, "seq": self._seq, "data": data},
                f"append to log {self._ts}",
            )
            self._buffer.clear()
            self._seq += 1

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def fileno(self) -> int | None:
        return None


class PostgresStorage:
    """See the module docstring and ``txn.persist.storage.StateStorage``."""

    def __init__(self, url: str, *, holder: str = "") -> None:
        self._url = url
        self._where = redact(url)
        self.holder = holder or "txn"
        self.epoch = 0
        """The epoch taken by ``open()`` (0 before)."""
        self.log_conn = _Conn(url, "txn-log")
        self._conn = _Conn(url, "txn-state")

    @property
    def location(self) -> str:
        return self._where

    # -- lifecycle --------------------------------------------------------------------

    def open(self) -> None:
        if self.epoch:
            return
        with self._session("take the leader epoch") as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(_SCHEMA)
            row = conn.execute(_TAKE_EPOCH, (self.holder,)).fetchone()
        assert row is not None
        self.epoch = int(row[0])
        log.info("took epoch %d of the transaction state in %s", self.epoch, self._where)

    def close(self) -> None:
        self.log_conn.close()
        self._conn.close()

    # -- the boundary -----------------------------------------------------------------

    @contextlib.contextmanager
    def _session(self, what: str, conn: _Conn | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A connection for ``what``; psycopg's errors become ``TxStorageError``."""
        holder = conn if conn is not None else self._conn
        with holder.lock:
            try:
                yield holder.get()
            except psycopg.Error as exc:
                raise TxStorageError(f"cannot {what} in {self._where}: {exc}") from exc

    def fenced_insert(self, conn: _Conn, sql: str, params: dict[str, Any], what: str) -> None:
        """Run the single-statement fenced ``sql``; ``FencedError`` when it inserted
        nothing because the epoch is stale."""
        with self._session(what, conn) as c:
            try:
                cur = c.execute(sql, {**params, "epoch": self.epoch})
            except psycopg.errors.UniqueViolation as exc:
                raise TxStorageError(f"cannot {what}: it exists already") from exc
            if cur.rowcount != 1:
                raise self._fenced(what)

    def _fenced(self, what: str) -> FencedError:
        return FencedError(
            f"cannot {what}: epoch {self.epoch} was superseded by a newer leader in {self._where}",
            epoch=self.epoch,
        )

    @contextlib.contextmanager
    def _fenced_transaction(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A transaction that goes on only while this storage's epoch is current."""
        with self._session(what) as conn, conn.transaction():
            row = conn.execute("SELECT epoch FROM txn_leader WHERE id = 1 FOR SHARE").fetchone()
            if row is None or int(row[0]) != self.epoch:
                raise self._fenced(what)
            yield conn

    # -- snapshots --------------------------------------------------------------------

    def list_snapshots(self) -> list[int]:
        with self._session("list snapshots") as conn:
            return [int(r[0]) for r in conn.execute("SELECT ts FROM txn_snapshot ORDER BY ts")]

    def read_snapshot(self, timestamp_ms: int) -> bytes:
        with self._session(f"read snapshot {timestamp_ms}") as conn:
            row = conn.execute(
                "SELECT data FROM txn_snapshot WHERE ts = %s", (timestamp_ms,)
            ).fetchone()
        if row is None:
            raise TxStorageError(f"no snapshot {timestamp_ms} in {self._where}")
        return bytes(row[0])

    def write_snapshot(self, timestamp_ms: int, data: bytes) -> None:
        with self._fenced_transaction(f"write snapshot {timestamp_ms}") as conn:
            conn.execute(
                "INSERT INTO txn_snapshot (ts, data) VALUES (%s, %s) "
                "ON CONFLICT (ts) DO UPDATE SET data = EXCLUDED.data",
                (timestamp_ms, bytes(data)),
            )

    def delete_snapshot(self, timestamp_ms: int) -> None:
        with self._fenced_transaction(f"delete snapshot {timestamp_ms}") as conn:
            conn.execute("DELETE FROM txn_snapshot WHERE ts = %s", (timestamp_ms,))

    # -- logs -------------------------------------------------------------------------

    def list_logs(self) -> list[int]:
        with self._session("list logs") as conn:
            return [int(r[0]) for r in conn.execute("SELECT ts FROM txn_log ORDER BY ts")]

    @contextlib.contextmanager
    def read_log(self, timestamp_ms: int) -> Iterator[bytes]:
        with self._session(f"read log {timestamp_ms}") as conn:
            if (
                conn.execute("SELECT 1 FROM txn_log WHERE ts = %s", (timestamp_ms,)).fetchone()
                is None
            ):
                raise TxStorageError(f"no log {timestamp_ms} in {self._where}")
            rows = conn.execute(
                "SELECT data FROM txn_log_chunk WHERE ts = %s ORDER BY seq", (timestamp_ms,)
            ).fetchall()
        yield b"".join(bytes(r[0]) for r in rows)

    def create_log(self, timestamp_ms: int) -> _PgLog:
        self.fenced_insert(
            self._conn, _CREATE_LOG, {"ts": timestamp_ms}, f"create log {timestamp_ms}"
        )
        return _PgLog(self, timestamp_ms)

    def truncate_log(self, timestamp_ms: int, size: int) -> None:
        with self._fenced_transaction(f"truncate log {timestamp_ms}") as conn:
            rows = conn.execute(
                "SELECT seq, length(data) FROM txn_log_chunk WHERE ts = %s ORDER BY seq",
                (timestamp_ms,),
            ).fetchall()
            start = 0
            for seq, length in rows:
                if start >= size:
                    conn.execute(
                        "DELETE FROM txn_log_chunk WHERE ts = %s AND seq = %s", (timestamp_ms, seq)
                    )
                elif start + length > size:
                    conn.execute(
                        "UPDATE txn_log_chunk SET data = substring(data FROM 1 FOR %s) "
                        "WHERE ts = %s AND seq = %s",
                        (size - start, timestamp_ms, seq),
                    )
                start += length

    def delete_log(self, timestamp_ms: int) -> None:
        with self._fenced_transaction(f"delete log {timestamp_ms}") as conn:
            conn.execute("DELETE FROM txn_log WHERE ts = %s", (timestamp_ms,))
