"""The write-ahead log with group commit.

Contract:

* ``append(edit)`` is called **under the manager's state lock**, right after the state
  change it records, so log order is state-change order. It only queues the edit and
  returns a ticket (1, 2, 3, ...); it never does I/O.
* One flusher thread takes everything queued, encodes it, writes it with one ``write``
  and one ``fdatasync``, then publishes the highest ticket it made durable. Callers wait
  with ``wait(ticket)`` (threads) or get told through a sync listener (event loops), so
  concurrent calls share one fsync and none returns before its edit is on disk.
* ``roll(timestamp)`` (also under the state lock) creates ``txlog.<timestamp>`` and
  switches to it: edits queued before it go to the old file, later ones to the new one.
* After a write or sync failure the log is *failed*: every waiter, present and future,
  gets ``TxStorageError``, and nothing more is written (a failed fsync cannot be retried
  safely). The owner must stop serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from txn.errors import TxStorageError
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_record
from txn.persist.storage import LogWriter
from txn.persist.store import TransactionStateStore

__all__ = ["SyncListener", "WalStats", "WriteAheadLog"]

log = logging.getLogger(__name__)

SyncListener = Callable[[int, BaseException | None], None]
"""Called on the flusher thread with (highest durable ticket, failure or None)."""


@dataclass(frozen=True, slots=True)
class _Roll:
    writer: LogWriter


@dataclass
class WalStats:
    """Counters since the log was opened."""

    edits: int = 0
    syncs: int = 0
    bytes: int = 0
    sync_seconds: float = 0.0
    max_batch: int = 0


class WriteAheadLog:
    """Group-committing writer of ``txlog.<ts>`` files. See the module docstring."""

    def __init__(
        self,
        store: TransactionStateStore,
        *,
        slow_sync_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._slow_sync_s = slow_sync_s
        self._monotonic = monotonic
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[TransactionEdit | _Roll] = []
        self._appended = 0
        self._synced = 0
        self._failure: TxStorageError | None = None
        self._closing = False
        self._flusher_idle = False
        self._listeners: list[SyncListener] = []
        self._writer: LogWriter | None = None
        self._file_seq = 0
        self._thread: threading.Thread | None = None
        self.current_timestamp_ms = 0
        self.stats = WalStats()

    # -- lifecycle --------------------------------------------------------------------

    def open(self, timestamp_ms: int) -> None:
        """Create ``txlog.<timestamp_ms>`` and start the flusher."""
        self._writer = self._store.create_log(timestamp_ms)
        self._file_seq = 0
        self.current_timestamp_ms = timestamp_ms
        self._thread = threading.Thread(target=self._run, name="txn-wal-flusher", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Make everything appended durable, close the file, stop the flusher.

        Raises ``TxStorageError`` if the log had failed.
        """
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._failure is not None:
            raise self._failure

    # -- appending and waiting --------------------------------------------------------

    @property
    def failure(self) -> TxStorageError | None:
        return self._failure

    @property
    def last_appended(self) -> int:
        """The ticket of the newest queued edit (a read barrier for answers that
        depend on state not yet durable)."""
        return self._appended

    @property
    def synced(self) -> int:
        return self._synced

    def append(self, edit: TransactionEdit) -> int:
        """Queue ``edit``; return its ticket. Call under the state lock."""
        with self._cond:
            if self._failure is not None:
                raise self._failure
            if self._closing:
                raise TxStorageError("the transaction log is closed")
            self._pending.append(edit)
            self._appended += 1
            if self._flusher_idle:
                self._cond.notify()
            return self._appended

    def roll(self, timestamp_ms: int) -> None:
        """Create ``txlog.<timestamp_ms>`` now and send later appends to it. Call under
        the state lock."""
        if self._failure is not None:
            raise self._failure
        writer = self._store.create_log(timestamp_ms)
        with self._cond:
            self._pending.append(_Roll(writer))
            self.current_timestamp_ms = timestamp_ms
            if self._flusher_idle:
                self._cond.notify()

    def wait(self, ticket: int, timeout_s: float | None = None) -> None:
        """Block until ``ticket`` is durable; raise ``TxStorageError`` if the log failed
        or ``TimeoutError`` after ``timeout_s``."""
        if ticket <= self._synced:
            return
        with self._cond:
            if not self._cond.wait_for(
                lambda: self._synced >= ticket or self._failure is not None, timeout_s
            ):
                raise TimeoutError(f"ticket {ticket} not durable after {timeout_s} s")
            if self._synced < ticket and self._failure is not None:
                raise self._failure

    def add_listener(self, listener: SyncListener) -> None:
        """Call ``listener`` after every sync (on the flusher thread); keep it short."""
        self._listeners.append(listener)

    def remove_listener(self, listener: SyncListener) -> None:
        self._listeners.remove(listener)

    # -- the flusher ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._flusher_idle = True
                    self._cond.wait()
                self._flusher_idle = False
                batch, self._pending = self._pending, []
                last_ticket = self._appended
                if not batch and self._closing:
                    return
            failure: TxStorageError | None = None
            try:
                self._write_batch(batch)
            except TxStorageError as exc:
                failure = exc
            except Exception as exc:  # encoding bugs must not leave waiters hanging
                failure = TxStorageError(f"cannot write the transaction log: {exc!r}")
                failure.__cause__ = exc
            with self._cond:
                if failure is None:
                    self._synced = last_ticket
                else:
                    log.critical("transaction log failed: %s", failure)
                    self._failure = failure
                self._cond.notify_all()
            for listener in list(self._listeners):
                try:
                    listener(self._synced, failure)
                except Exception:
                    log.exception("sync listener failed")
            if failure is not None:
                return

    def _write_batch(self, batch: list[TransactionEdit | _Roll]) -> None:
        started = self._monotonic()
        chunk: list[bytes] = []
        edits = 0
        written = 0
        for item in batch:
            if isinstance(item, _Roll):
                written += self._flush(chunk)
                chunk = []
                assert self._writer is not None
                self._writer.close()
                self._writer = item.writer
                self._file_seq = 0
                continue
            chunk.append(encode_record(self._file_seq, item))
            self._file_seq += 1
            edits += 1
        written += self._flush(chunk)
        elapsed = self._monotonic() - started
        stats = self.stats
        stats.edits += edits
        stats.syncs += 1
        stats.bytes += written
        stats.sync_seconds += elapsed
        stats.max_batch = max(stats.max_batch, edits)
        if elapsed >= self._slow_sync_s:
            log.warning("slow transaction-log sync: %d edits took %.3f s", edits, elapsed)

    def _flush(self, chunk: list[bytes]) -> int:
        if not chunk:
            return 0
        assert self._writer is not None
        data = b"".join(chunk)
        self._writer.write(data)
        # fsync before any waiter is released: an acknowledged edit must survive a crash.
        self._writer.sync()
        return len(data)
