"""``SqliteTable``: a transactional key-value table on SQLite — a ready
``TransactionAware`` participant with Tephra's visibility rules (those of Tephra's
``TransactionAwareHTable``), to use as is or to start a store of your own from.

Every version of a key is a row ``(key, version, value)``: ``version`` is the write
pointer it was written under, ``value`` NULL for a delete. Inside a transaction:

* **writes** go under the transaction's current write pointer: ``put`` and ``delete``
  are buffered, and ``commit_tx`` (the context's persist step, also run at
  ``checkpoint``) writes the buffer in one synced SQLite transaction;
* **reads** go through the transaction's snapshot: the newest version that
  ``tx.is_visible`` accepts — committed before the transaction started, or its own
  (buffered writes first). Versions of transactions in progress, invalid or rolled back
  are never seen;
* **conflicts**: the change keys are ``name + b"\\0" + key`` for every key written;
* **rollback** deletes the rows written under any of the transaction's write pointers.

Crash safety needs nothing more: rows persisted by a transaction that never commits carry
a write pointer that stays in progress until the manager times it out and invalidates
it, so no reader sees them.

**Invalid-list pruning.** The table is a ``txn.prune.PrunePlugin``. ``remove_invalid(tx)``
is its cleanup step: it deletes every row written by a transaction in ``tx``'s invalid
list and records the prune bound of that snapshot (Tephra's ``TxUtils.getPruneUpperBound``:
the largest invalid id, or the read pointer - 1 with none, but below the oldest
transaction in progress), up to which no invalid transaction has data here any more;
``fetch_prune_upper_bound`` reports it (never above the pruner's inactive bound). Run
``remove_invalid`` with a fresh transaction's snapshot before each pruning run (see
``docs/txn.md``). The bound is kept in memory: after a restart the table reports none
until its next cleanup step.

One ``SqliteTable`` takes part in one transaction at a time; several may share a file
(each its own connection). ``get``/``put``/``delete``/``scan`` outside a transaction raise
``InvalidStateError``. SQLite errors surface as ``TxStorageError``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from txn.errors import InvalidStateError, TxStorageError
from txn.transaction import NO_TX_IN_PROGRESS, Transaction

__all__ = ["SqliteTable"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    name    TEXT    NOT NULL,
    key     BLOB    NOT NULL,
    version INTEGER NOT NULL,
    value   BLOB,
    PRIMARY KEY (name, key, version)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS versions_by_version ON versions (version);
"""


class SqliteTable:
    """See the module docstring."""

    def __init__(self, path: str | os.PathLike[str], name: str = "table") -> None:
        self.name = name
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                os.fspath(path), isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise TxStorageError(f"cannot open the table {name} in {path}: {exc}") from exc
        self._tx: Transaction | None = None
        self._buffer: dict[bytes, bytes | None] = {}
        self._changed: set[bytes] = set()
        self._bound = -1

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- data -------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` this transaction sees, None if it has none."""
        tx = self._current()
        if key in self._buffer and tx.is_visible(tx.write_pointer):
            return self._buffer[key]
        with self._sql() as db:
            rows = db.execute(
                "SELECT version, value FROM versions WHERE name = ? AND key = ? "
                "ORDER BY version DESC",
                (self.name, key),
            )
            for version, value in rows:
                if tx.is_visible(version):
                    return None if value is None else bytes(value)
        return None

    def put(self, key: bytes, value: bytes) -> None:
        self._current()
        self._buffer[bytes(key)] = bytes(value)
        self._changed.add(bytes(key))

    def delete(self, key: bytes) -> None:
        self._current()
        self._buffer[bytes(key)] = None
        self._changed.add(bytes(key))

    def scan(self, start: bytes = b"", end: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """Every (key, value) this transaction sees with ``start <= key < end``, by key."""
        tx = self._current()
        seen: dict[bytes, bytes | None] = {}
        query = "SELECT key, version, value FROM versions WHERE name = ? AND key >= ?"
        args: tuple[object, ...] = (self.name, start)
        if end is not None:
            query += " AND key < ?"
            args += (end,)
        with self._sql() as db:
            for key, version, value in db.execute(query + " ORDER BY key, version DESC", args):
                if key not in seen and tx.is_visible(version):
                    seen[key] = None if value is None else bytes(value)
        if tx.is_visible(tx.write_pointer):
            for key, value in self._buffer.items():
                if key >= start and (end is None or key < end):
                    seen[key] = value
        return sorted((k, v) for k, v in seen.items() if v is not None)

    # -- txn.TransactionAware ---------------------------------------------------------

    def start_tx(self, tx: Transaction) -> None:
        self._tx = tx
        self._buffer.clear()
        self._changed.clear()

    def update_tx(self, tx: Transaction) -> None:
        self._tx = tx  # a checkpoint: the changes so far are kept

    def get_tx_changes(self) -> Collection[bytes]:
        prefix = self.name.encode() + b"\0"
        return [prefix + key for key in sorted(self._changed)]

    def commit_tx(self) -> bool:
        tx = self._current()
        rows = [(self.name, k, tx.write_pointer, v) for k, v in self._buffer.items()]
        try:
            with self._write() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO versions (name, key, version, value) "
                    "VALUES (?, ?, ?, ?)",
                    rows,
                )
        except TxStorageError:
            log.exception("table %s: persisting the changes of %s failed", self.name, tx)
            return False
        self._buffer.clear()
        return True

    def post_tx_commit(self) -> None:
        self._tx = None
        self._buffer.clear()
        self._changed.clear()

    def rollback_tx(self) -> bool:
        tx = self._tx
        self._buffer.clear()
        if tx is None or not self._changed:
            self._changed.clear()
            return True
        pointers = sorted({tx.transaction_id, tx.write_pointer, *tx.checkpoint_write_pointers})
        marks = ",".join("?" * len(pointers))
        try:
            with self._write() as db:
                db.execute(
                    f"DELETE FROM versions WHERE name = ? AND version IN ({marks})",
                    (self.name, *pointers),
                )
        except TxStorageError:
            log.exception("table %s: rolling back %s failed", self.name, tx)
            return False  # the context then invalidates the transaction
        self._changed.clear()
        return True

    def transaction_aware_name(self) -> str:
        return f"SqliteTable({self.name})"

    # -- txn.prune.PrunePlugin --------------------------------------------------------

    def remove_invalid(self, tx: Transaction) -> int:
        """Delete every row of a transaction invalid in ``tx``'s snapshot; remember the
        prune bound that makes true. Returns the rows deleted."""
        deleted = 0
        with self._write() as db:
            for chunk in _chunks(tx.invalids, 500):
                marks = ",".join("?" * len(chunk))
                cursor = db.execute(
                    f"DELETE FROM versions WHERE name = ? AND version IN ({marks})",
                    (self.name, *chunk),
                )
                deleted += cursor.rowcount
        self._bound = max(self._bound, _prune_upper_bound(tx))
        return deleted

    def fetch_prune_upper_bound(self, now_ms: int, inactive_tx_bound: int) -> int:
        """See ``txn.prune.PrunePlugin``: the bound of the last ``remove_invalid``."""
        return min(self._bound, inactive_tx_bound)

    def prune_complete(self, now_ms: int, max_pruned_invalid: int) -> None:
        log.info("table %s: invalid ids up to %d were pruned", self.name, max_pruned_invalid)

    # -- plumbing ---------------------------------------------------------------------

    def _current(self) -> Transaction:
        if self._tx is None:
            raise InvalidStateError(f"table {self.name}: no transaction (use it in a context)")
        return self._tx

    @contextmanager
    def _sql(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as exc:
                raise TxStorageError(f"table {self.name}: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One SQLite transaction, durable when the block ends (rolled back on error)."""
        with self._sql() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")


def _prune_upper_bound(tx: Transaction) -> int:
    """Tephra's ``TxUtils.getPruneUpperBound``."""
    first_in_progress = tx.first_in_progress
    if not tx.invalids and first_in_progress == NO_TX_IN_PROGRESS:
        return tx.read_pointer - 1
    max_invalid = tx.invalids[-1] if tx.invalids else NO_TX_IN_PROGRESS
    return min(max_invalid, first_in_progress - 1)


def _chunks(ids: tuple[int, ...], size: int) -> Iterator[tuple[int, ...]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]
