"""``PostgresStore``: the messaging tables in PostgreSQL, shared by several service
instances. See ``tms.store.kv`` for the contract; this module says how it is met.

Schema (created on first use, under an advisory lock so instances starting together do
not race)::

    tms_kv(t bytea, k bytea, v bytea, PRIMARY KEY (t, k))   single rows of every table
    tms_run(t, k, kend, ks bytea[], vs bytea[], ...)        runs: appended rows, packed
    tms_fence(name bytea PRIMARY KEY, epoch bigint)           fences (topic ownership)

A write of appended rows (``new_keys``: a publish request's messages, a transaction's
payloads) is stored as one *run* row per table (``tms.store.postgres.runs``: what a run
is, and the invariant that keeps every key in one place); reads merge runs and single
rows. A database written before runs existed (``tms_kv`` only) is read as it is: its
rows are single rows, and the run table is created beside them.

``bytea`` compares as unsigned bytes, shorter first on a common prefix: the contract's
key order, served by the primary key's index.

* **Writes** are serialized through a ``tms.commit.GroupCommit`` on one connection:
  whoever finds no write running takes every write queued meanwhile (of any topics) and
  applies them in **one statement**, fenced, its own transaction
  (``tms.store.postgres.writes`` says how).
* **A failed write** (an error, or an answer lost: the commit may or may not have
  happened) takes the store *down*: its connection is dropped, and every call raises
  ``StorageUnavailableError`` until a new connection has been made (at most one attempt
  per ``retry_interval_s``), which bumps ``epoch`` — state read before may be stale.
  A refused fence is a known outcome and takes nothing down.
* **One user of the database, or one cluster.** The write connection holds a
  session-level advisory lock on the database for as long as it is open: exclusive for
  a store made alone (``shared=False``: an instance not in a cluster), shared for the
  instances of one cluster (``shared=True``, whose topics are fenced). A store that
  cannot take it refuses to open (``StorageUnavailableError`` naming the reason), and a
  write connection that was lost takes the store down until a new one holds the lock
  again: every write goes through a connection that holds it. PostgreSQL drops the lock
  with the session, so a killed instance leaves nothing behind (a lease row would
  need a clock and a timeout of its own).
* **Scans** run in a REPEATABLE READ, READ ONLY transaction on a pooled connection
  (``tms.store.postgres.connections``), read in key-range chunks (``LIMIT``, 32 rows
  growing to 1,024, continuing after the last key; runs 4 growing to 64), single rows
  and runs merged by key: every chunk comes from the transaction's one snapshot, taken
  when the first chunk is read. The connection is held until the scan is exhausted or
  closed.
* ``get`` is one statement (its own snapshot: the single row, or the run holding the
  key); ``approximate_size`` is the planner's estimate for the range in both tables
  (rows x average row width, from the statistics autovacuum keeps: no row is read),
  or, until a table has statistics, its rows' lengths summed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Any

import psycopg

from tms.commit import GroupCommit
from tms.errors import StorageUnavailableError, write_interrupted
from tms.store.kv import Fence, Update, WriteOp
from tms.store.postgres.connections import Connections, connect, translated
from tms.store.postgres.runs import GET, create_run_table, merge_chunks, run_chunks
from tms.store.postgres.writes import PendingWrite, write_batch
from txms_common.pgurl import redact

__all__ = ["PostgresStore"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tms_kv (
    t bytea NOT NULL,
    k bytea NOT NULL,
    v bytea NOT NULL,
    PRIMARY KEY (t, k)
);
CREATE TABLE IF NOT EXISTS tms_fence (
    name  bytea PRIMARY KEY,
    epoch bigint NOT NULL,
    since timestamptz NOT NULL DEFAULT now()
);
"""
_SCHEMA_LOCK = 0x746D_735F_7363_6800  # pg_advisory_xact_lock key: "tms_sch"
_INSTANCE_LOCK = 0x746D_735F_696E_7374  # the write connection's advisory lock: "tms_inst"
_ACQUIRE = """
INSERT INTO tms_fence (name, epoch) VALUES (%b, 1)
ON CONFLICT (name) DO UPDATE SET epoch = tms_fence.epoch + 1, since = now()
RETURNING epoch
"""
_FIRST_CHUNK = 32
_MAX_CHUNK = 1024


class _PgTable:
    def __init__(self, owner: PostgresStore, name: bytes) -> None:
        self._owner = owner
        self.name = name

    @property
    def epoch(self) -> int:
        return self._owner.epoch

    def get(self, key: bytes) -> bytes | None:
        row = self._owner.read_one(GET, {"t": self.name, "k": key}, "read a row")
        return None if row is None else bytes(row[0])

    def scan(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return chain.from_iterable(self.scan_chunks(start, stop, reverse=reverse))

    def scan_chunks(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[list[tuple[bytes, bytes]]]:
        return self._owner.scan_chunks(self.name, start, stop, reverse)

    def write(
        self,
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        *,
        sync: bool = True,
        epoch: int | None = None,
    ) -> None:
        name = self.name
        ops: list[WriteOp] = [(name, k, v) for k, v in puts]
        ops.extend((name, k, None) for k in deletes)
        self._owner.write(ops, sync=sync, epoch=epoch)

    def approximate_size(self, start: bytes, stop: bytes | None) -> int:
        where = "WHERE t = %b AND k >= %b" + ("" if stop is None else " AND k < %b")
        params = (self.name, start) if stop is None else (self.name, start, stop)
        total = 0
        for table, columns, width in (
            ("tms_kv", "k, v", "length(k) + length(v)"),
            ("tms_run", "ks, vs", "pg_column_size(ks) + pg_column_size(vs)"),
        ):
            if not self._owner.analyzed(table):
                # no statistics yet (a young, small table): the rows' lengths, summed
                row = self._owner.read_one(
                    f"SELECT coalesce(sum({width}), 0) FROM {table} {where}",
                    params,
                    "measure a size",
                )
                total += int(row[0]) if row is not None else 0
                continue
            # The planner's estimate (rows x average width, from the table's statistics):
            # no row is read, so a metrics scrape costs the same for any topic size.
            row = self._owner.read_one(
                f"EXPLAIN (FORMAT JSON) SELECT {columns} FROM {table} {where}",
                params,
                "estimate a size",
            )
            plan = row[0][0]["Plan"] if row is not None else {"Plan Rows": 0, "Plan Width": 0}
            total += int(plan["Plan Rows"] * plan["Plan Width"])
        return total


class PostgresStore:
    """See the module docstring and ``tms.store.kv.KeyValueStore``. Thread-safe."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "tms",
        shared: bool = False,
        retry_interval_s: float = 1.0,
        timeout_s: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Connects and creates the schema (``StorageUnavailableError`` when it cannot,
        or when another store holds the database: see ``shared`` in the module
        docstring)."""
        self.url = url
        self.shared = shared
        self.where = redact(url)
        self._name = name
        self._timeout_s = timeout_s
        self._retry_interval_s = retry_interval_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._tables: dict[bytes, _PgTable] = {}
        self._reads = Connections(url, f"{name}-read", timeout_s=timeout_s)
        self._fence_lock = threading.Lock()
        self._closed = False
        self._analyzed: set[str] = set()
        self._failure = ""
        self._next_attempt = 0.0
        self.epoch = 0
        with translated("open the store", self.where):
            self._conn: psycopg.Connection[Any] | None = self._connect()
            self._fence_conn: psycopg.Connection[Any] | None = None
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                self._conn.execute(_SCHEMA)
                create_run_table(self._conn)
        self._writes: GroupCommit[PendingWrite] = GroupCommit(
            self._write_now, failed=write_interrupted
        )

    def _connect(self) -> psycopg.Connection[Any]:
        """A write connection holding the instance lock (see the module docstring)."""
        conn = connect(self.url, f"{self._name}-write", timeout_s=self._timeout_s)
        try:
            take = "pg_try_advisory_lock_shared" if self.shared else "pg_try_advisory_lock"
            row = conn.execute(f"SELECT {take}(%s)", (_INSTANCE_LOCK,)).fetchone()
        except BaseException:
            conn.close()
            raise
        if row is None or not row[0]:
            conn.close()
            mode = "in a cluster" if self.shared else "alone"
            raise StorageUnavailableError(
                f"{self.where} is in use by another tms instance: an instance not in a "
                "cluster needs the database to itself, and instances of a cluster "
                f"(--zookeeper) share it only with each other (this one runs {mode})"
            )
        return conn

    # -- availability -------------------------------------------------------------------

    def _check(self) -> None:
        """Raise unless the store is open and up; recover it if it is due (see the module
        docstring)."""
        with self._lock:
            if self._closed:
                raise StorageUnavailableError("the store is closed")
            if self._conn is not None:
                return
            if self._monotonic() < self._next_attempt:
                raise StorageUnavailableError(
                    f"the store is down after a failed write ({self._failure}); reconnecting"
                )
            self._next_attempt = self._monotonic() + self._retry_interval_s
            try:
                with translated("reconnect", self.where):
                    self._conn = self._connect()
            except StorageUnavailableError:
                log.warning("reconnecting to %s failed, retrying later", self.where)
                raise
            self.epoch += 1
            log.warning("PostgreSQL store up again after a failed write (%s)", self._failure)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._failure = str(exc)
            self._next_attempt = self._monotonic()  # the next call tries at once
        if conn is not None:
            conn.close()
        log.error("a write to %s failed; the store is down until reconnected: %s", self.where, exc)

    # -- reads --------------------------------------------------------------------------

    def table(self, name: bytes) -> _PgTable:
        if not name:
            raise ValueError("table names are non-empty")
        with self._lock:
            if name not in self._tables:
                self._tables[name] = _PgTable(self, name)
            return self._tables[name]

    def read_one(
        self, sql: str, params: Sequence[object] | dict[str, object], what: str
    ) -> tuple[Any, ...] | None:
        self._check()
        with translated(what, self.where), self._reads.connection() as conn:
            row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
            return row

    def analyzed(self, table: str = "tms_kv") -> bool:
        """Whether ``table`` (``tms_kv`` or ``tms_run``) has planner statistics
        (autovacuum analyzes it as it grows)."""
        if table not in self._analyzed:
            row = self.read_one(
                "SELECT reltuples >= 0 FROM pg_class WHERE oid = %s::regclass",
                (table,),
                "read the table's statistics",
            )
            if not (row and row[0]):
                return False
            self._analyzed.add(table)
        return True

    def scan_chunks(
        self, table: bytes, start: bytes, stop: bytes | None, reverse: bool
    ) -> Iterator[list[tuple[bytes, bytes]]]:
        # Checked at the first chunk (a generator runs nothing before it), as LevelDB's.
        self._check()
        order = "DESC" if reverse else "ASC"
        base = "SELECT k, v FROM tms_kv WHERE t = %b AND k >= %b"
        if stop is not None:
            base += " AND k < %b"
        bounds: tuple[bytes, ...] = (table, start) if stop is None else (table, start, stop)
        after = " AND k < %b" if reverse else " AND k > %b"
        with (
            translated("scan", self.where),
            self._reads.connection() as conn,
            conn.transaction(),  # one snapshot for every chunk
        ):
            singles = self._single_chunks(conn, base, bounds, order, after)
            yield from merge_chunks(singles, run_chunks(conn, table, start, stop, reverse), reverse)

    @staticmethod
    def _single_chunks(
        conn: psycopg.Connection[Any],
        base: str,
        bounds: tuple[bytes, ...],
        order: str,
        after: str,
    ) -> Iterator[list[tuple[bytes, bytes]]]:
        """The range's rows of ``tms_kv`` (not those of runs), chunk by chunk."""
        size = _FIRST_CHUNK
        last: bytes | None = None
        while True:
            if last is None:
                sql, params = f"{base} ORDER BY k {order} LIMIT %s", (*bounds, size)
            else:
                sql = f"{base}{after} ORDER BY k {order} LIMIT %s"
                params = (*bounds, last, size)
            rows = conn.execute(sql, params).fetchall()
            if rows:
                chunk = [(bytes(k), bytes(v)) for k, v in rows]
                last = chunk[-1][0]
                yield chunk
            if len(rows) < size:
                return
            size = min(size * 2, _MAX_CHUNK)

    # -- writes -------------------------------------------------------------------------

    def write(
        self,
        ops: Sequence[WriteOp],
        *,
        sync: bool = True,
        epoch: int | None = None,
        fence: Fence | None = None,
        updates: Sequence[Update] = (),
        new_keys: bool = False,
    ) -> None:
        mine = PendingWrite(ops, sync, epoch, fence, updates, new_keys and not updates)
        self._writes.run([mine])
        if mine.error is not None:
            raise mine.error

    def _write_now(self, batch: list[PendingWrite]) -> None:
        """Apply ``batch`` in one database transaction, setting each one's ``error``."""
        try:
            self._check()
        except StorageUnavailableError as exc:
            for w in batch:
                w.error = exc
            return
        conn = self._conn
        assert conn is not None  # only this thread (the leader) replaces it
        writes = []
        for w in batch:
            if w.epoch is not None and w.epoch != self.epoch:
                w.error = StorageUnavailableError(
                    "the store reconnected after a failed write since this write was prepared"
                )
            else:
                writes.append(w)
        if not writes:
            return
        try:
            write_batch(conn, writes, self.where)
        except psycopg.Error as exc:
            self._fail(exc)
            error = StorageUnavailableError(f"PostgreSQL: a write to {self.where} failed: {exc}")
            for w in writes:
                if w.error is None:
                    w.error = error

    # -- fences -------------------------------------------------------------------------

    def acquire_fence(self, name: bytes) -> int:
        self._check()
        with self._fence_lock, translated(f"take fence {name!r}", self.where):
            try:
                if self._fence_conn is None or self._fence_conn.closed or self._fence_conn.broken:
                    self._fence_conn = connect(
                        self.url, f"{self._name}-fence", timeout_s=self._timeout_s
                    )
                row = self._fence_conn.execute(_ACQUIRE, (name,)).fetchone()
            except psycopg.Error:
                if self._fence_conn is not None:
                    self._fence_conn.close()
                self._fence_conn = None
                raise
        assert row is not None
        return int(row[0])

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._reads.close()
        # a write under way finishes first: the write connection is the leader's
        self._writes.run([PendingWrite((), True, None, None)])
        with self._lock:
            conn, self._conn = self._conn, None
        with self._fence_lock:
            fence_conn, self._fence_conn = self._fence_conn, None
        if conn is not None:
            # Released before the connection goes: the server drops a closed session's
            # locks only once its backend has exited, and a store opened right after
            # (a restart) would find the database still held.
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock_all()")
        for c in (conn, fence_conn):
            if c is not None:
                c.close()
