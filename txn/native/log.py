"""``NativeLog``: the write-ahead log of the native engine (``txn.native._core.Log``).

Same contract as ``txn.persist.wal.WriteAheadLog`` for its owner (append under the
state lock, leader-based group commit, ``wait``, ``roll``, a failed write or sync fails
the log for good) and the same files (``txn.persist.log_codec``'s framed format). What
differs is where it runs: records are queued and files written and synced in C, with the
GIL released during the I/O, so the native server appends the hot calls' edits without
Python and leads flushes on its own thread. It has no split flush: the native server
syncs on its loop (docs/txn.md, "The native engine").
"""

from __future__ import annotations

import logging

from txn.durability import LogStats, SyncListener
from txn.errors import TxStorageError
from txn.native._core import Log
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_edit
from txn.persist.store import TransactionStateStore

__all__ = ["NativeLog"]

log = logging.getLogger(__name__)


def _slow(edits: int, seconds: float) -> None:
    log.warning("slow transaction-log sync: %d edits took %.3f s", edits, seconds)


class NativeLog:
    """See the module docstring. ``core`` is the C log the native server appends to."""

    def __init__(self, store: TransactionStateStore | None, *, slow_sync_s: float = 1.0) -> None:
        """``store`` None: a manager without storage (nothing is written)."""
        self._store = store
        self.core = Log(TxStorageError, notify=True, slow_sync_s=slow_sync_s, on_slow=_slow)
        self.current_timestamp_ms = 0

    def _writer(self, timestamp_ms: int) -> object:
        return None if self._store is None else self._store.create_log(timestamp_ms)

    def open(self, timestamp_ms: int) -> None:
        self.core.open(self._writer(timestamp_ms))
        self.current_timestamp_ms = timestamp_ms

    def close(self) -> None:
        self.core.close()

    @property
    def failure(self) -> TxStorageError | None:
        failure = self.core.failure
        assert failure is None or isinstance(failure, TxStorageError)
        return failure

    @property
    def last_appended(self) -> int:
        return self.core.last_appended

    @property
    def has_pending(self) -> bool:
        return self.core.has_pending

    @property
    def synced(self) -> int:
        return self.core.synced

    def append(self, edit: TransactionEdit) -> int:
        return self.core.append(encode_edit(edit))

    def roll(self, timestamp_ms: int) -> None:
        failure = self.core.failure
        if failure is not None:
            raise failure
        self.core.roll(self._writer(timestamp_ms))
        self.current_timestamp_ms = timestamp_ms

    def wait(self, ticket: int, timeout_s: float | None = None) -> None:
        self.core.wait(ticket, timeout_s)

    def flush(self) -> int | None:
        return self.core.flush()

    def add_listener(self, listener: SyncListener, *, failures_only: bool = False) -> None:
        self.core.add_listener(listener, failures_only=failures_only)

    def remove_listener(self, listener: SyncListener) -> None:
        self.core.remove_listener(listener)

    @property
    def stats(self) -> LogStats:
        edits, syncs, written, seconds, max_batch = self.core.stats
        return LogStats(edits, syncs, written, seconds, max_batch)
