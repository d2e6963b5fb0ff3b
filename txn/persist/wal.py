"""The write-ahead log with group commit.

Contract:

* ``append(edit)`` is called **under the manager's state lock**, right after the state
  change it records, so log order is state-change order. It only queues the edit and
  returns a ticket (1, 2, 3, ...); it never does I/O.
* Durability is leader-based group commit: whoever needs a ticket durable while no flush
  is running becomes the leader and flushes *everything* queued — one encode, one
  ``write``, one ``fdatasync`` — then publishes the highest ticket it made durable.
  Concurrent waiters find a flush running and wait for it; edits queued meanwhile go out
  with the next leader. No call returns before its edit is on disk, and no thread
  hand-off is needed for the leader's own call (hand-offs cost tens of microseconds on a
  VM, as much as the work itself).
* ``wait(ticket)`` is the thread API. An event loop calls ``flush()`` once per loop
  iteration instead and releases the replies the returned ticket covers; a sync
  listener tells it when a flush led by another thread finished.
* A flush can also be split so that its ``fdatasync`` runs elsewhere while the caller
  goes on (``txn.persist.syncer``): ``start_flush()`` writes the queued batch without
  syncing it and returns an ``UnsyncedWrite``; the caller has the file synced and then
  calls ``finish_flush(write, failure)``. Split flushes pipeline: the next one may be
  started (written, its sync requested) while earlier ones are still syncing, so that
  several ``fdatasync`` calls are in flight (the disk completes them faster together
  than one after another). They finish in write order: a ticket counts as durable only
  when its flush *and every earlier one* succeeded — a later sync's success says
  nothing about an earlier one that failed. While any split flush is in flight,
  threads wait for it exactly as for an ordinary flush.
* ``roll(timestamp)`` (also under the state lock) creates ``txlog.<timestamp>`` and
  switches to it: edits queued before it go to the old file, later ones to the new one.
* Files are written in the framed format of ``txn.persist.log_codec``: a file header,
  then one CRC32C-checked frame per batch and file, each saying how much of the file was
  durable when it was written (so recovery can tell a torn tail from lost data).
* After a write or sync failure the log is *failed*: every waiter, present and future,
  gets ``TxStorageError``, and nothing more is written (a failed fsync cannot be retried
  safely). The owner must stop serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from txn.durability import Listeners, LogStats, SyncListener
from txn.errors import TxStorageError
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_record
from txn.persist.log_codec import FILE_HEADER, encode_frames
from txn.persist.storage import LogWriter
from txn.persist.store import TransactionStateStore

__all__ = ["UnsyncedWrite", "WriteAheadLog"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Roll:
    writer: LogWriter


@dataclass(frozen=True, slots=True)
class UnsyncedWrite:
    """A flush whose batch is written but not yet synced (see the module docstring):
    ``writer`` must be synced before ``ticket`` may count as durable."""

    writer: LogWriter
    ticket: int
    edits: int
    bytes: int
    started: float
    end: int = 0
    """The file offset the batch ends at."""


@dataclass(slots=True)
class _Flight:
    """A split flush written and not yet finished."""

    ticket: int
    writer: LogWriter
    end: int
    done: bool = False


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
        self._leading = False  # a thread's flush(): writing and syncing
        self._writing = False  # start_flush() is writing its batch
        self._flights: deque[_Flight] = deque()  # split flushes in flight, in write order
        self._failure: TxStorageError | None = None
        self._closed = True
        self._listeners = Listeners()
        self._writer: LogWriter | None = None
        self._file_seq = 0
        self._file_size = 0  # bytes written to the current file
        # (file, bytes of it known durable): a lower bound, replaced as a whole so that a
        # flush finishing on another thread never credits one file's bytes to another
        self._durable_mark: tuple[LogWriter | None, int] = (None, 0)
        self.current_timestamp_ms = 0
        self.stats = LogStats()

    # -- lifecycle --------------------------------------------------------------------

    def open(self, timestamp_ms: int) -> None:
        """Create ``txlog.<timestamp_ms>`` and accept appends."""
        self._writer = self._store.create_log(timestamp_ms)
        self._file_seq = self._file_size = 0
        self.current_timestamp_ms = timestamp_ms
        self._closed = False

    def close(self) -> None:
        """Make everything appended durable and close the file.

        Raises ``TxStorageError`` if the log had failed.
        """
        try:
            if self._failure is None and not self._closed:
                self.wait(self._appended)
        finally:
            with self._cond:
                self._closed = True
                pending, self._pending = self._pending, []
            for item in pending:  # only after a failure: release unused new files
                if isinstance(item, _Roll):
                    item.writer.close()
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
    def has_pending(self) -> bool:
        """Edits are queued that no flush has taken yet."""
        return bool(self._pending)

    @property
    def synced(self) -> int:
        return self._synced

    def append(self, edit: TransactionEdit) -> int:
        """Queue ``edit``; return its ticket. Call under the state lock."""
        with self._cond:
            if self._failure is not None:
                raise self._failure
            if self._closed:
                raise TxStorageError("the transaction log is closed")
            self._pending.append(edit)
            self._appended += 1
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

    def wait(self, ticket: int, timeout_s: float | None = None) -> None:
        """Block until ``ticket`` is durable, leading a flush when none is running.

        Raises ``TxStorageError`` if the log failed, ``TimeoutError`` after ``timeout_s``.
        """
        deadline = None if timeout_s is None else self._monotonic() + timeout_s
        while True:
            with self._cond:
                while True:
                    if self._synced >= ticket:
                        return
                    if self._failure is not None:
                        raise self._failure
                    if not self._busy():
                        break  # lead the next flush
                    remaining = None if deadline is None else deadline - self._monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"ticket {ticket} not durable after {timeout_s} s")
                    self._cond.wait(remaining)
            self.flush()

    def _busy(self) -> bool:
        """A flush of any kind is running (call under the lock)."""
        return self._leading or self._writing or bool(self._flights)

    def flush(self) -> int | None:
        """Flush everything queued on the calling thread; return the durable ticket.

        Returns None without flushing while another flush (ordinary or split) is
        running: its end is reported to the sync listeners. Raises ``TxStorageError``
        if the log has failed.
        """
        with self._cond:
            if self._failure is not None:
                raise self._failure
            if self._busy():
                return None
            if not self._pending:
                return self._synced
            self._leading = True
            batch, self._pending = self._pending, []
            last_ticket = self._appended
        failure: TxStorageError | None = None
        try:
            self._write_batch(batch, sync=True)
        except Exception as exc:
            failure = _storage_error(exc)
        with self._cond:
            self._leading = False
            self._settle(last_ticket, failure)
        self._report(failure)
        if failure is not None:
            raise failure
        return last_ticket

    def start_flush(self) -> UnsyncedWrite | None:
        """Write everything queued without syncing it and return it as an
        ``UnsyncedWrite``, which the caller must pass to ``finish_flush`` once, whatever
        happens. Split flushes already in flight do not stop it (the caller bounds how
        many run at once). None when nothing is queued or an ordinary flush is running.
        Raises ``TxStorageError`` (the log has then failed) if the log has failed or the
        write fails. Call from one thread at a time."""
        with self._cond:
            if self._failure is not None:
                raise self._failure
            if self._leading or self._writing or not self._pending:
                return None
            self._writing = True
            batch, self._pending = self._pending, []
            last_ticket = self._appended
        started = self._monotonic()
        try:
            edits, written = self._write_batch(batch, sync=False)
        except Exception as exc:
            failure = _storage_error(exc)
            with self._cond:
                self._writing = False
                self._settle(last_ticket, failure)
            self._report(failure)
            raise failure from exc
        assert self._writer is not None
        with self._cond:
            self._writing = False
            self._flights.append(_Flight(last_ticket, self._writer, self._file_size))
        return UnsyncedWrite(
            self._writer, last_ticket, edits, written, started, end=self._file_size
        )

    def finish_flush(self, write: UnsyncedWrite, failure: BaseException | None) -> None:
        """End a split flush: its file was synced (``failure`` None), or syncing it
        failed, which fails the log. Its ticket becomes durable once every earlier split
        flush has finished too."""
        error = None if failure is None else _storage_error(failure)
        if error is None:
            self._count(write.edits, write.bytes, write.started)
        with self._cond:
            for flight in self._flights:
                if flight.ticket == write.ticket:
                    flight.done = True
                    break
            durable = self._synced
            while self._flights and self._flights[0].done:
                flight = self._flights.popleft()
                durable = flight.ticket
                writer, mark = self._durable_mark
                if error is None and flight.writer is self._writer:
                    # Tagged with its file: read by a write to another one, it counts 0.
                    known = mark if writer is flight.writer else 0
                    self._durable_mark = (flight.writer, max(known, flight.end))
            self._settle(durable, error)
        self._report(error)

    @property
    def in_flight(self) -> int:
        """Split flushes written and not yet finished."""
        return len(self._flights)

    def _settle(self, durable: int, failure: TxStorageError | None) -> None:
        """Record the outcome of a flush (call under the lock) and wake the waiters."""
        if failure is None:
            self._synced = max(self._synced, durable)
        elif self._failure is None:
            log.critical("transaction log failed: %s", failure)
            self._failure = failure
        self._cond.notify_all()

    def _report(self, failure: TxStorageError | None) -> None:
        self._listeners.report(self._synced, failure)

    def add_listener(self, listener: SyncListener, *, failures_only: bool = False) -> None:
        """Call ``listener`` after every flush (or only after one that failed), on the thread
        that led it; keep it short."""
        self._listeners.add(listener, failures_only)

    def remove_listener(self, listener: SyncListener) -> None:
        self._listeners.remove(listener)

    # -- writing ----------------------------------------------------------------------

    def _write_batch(self, batch: list[TransactionEdit | _Roll], *, sync: bool) -> tuple[int, int]:
        """Write ``batch``; sync it when ``sync`` (a file left for a newer one is always
        synced before it is closed). Returns (edits, bytes)."""
        started = self._monotonic()
        chunk: list[bytes] = []
        edits = 0
        written = 0
        for item in batch:
            if isinstance(item, _Roll):
                written += self._write(chunk, sync=True)
                chunk = []
                assert self._writer is not None
                self._writer.close()
                self._writer = item.writer
                self._file_seq = self._file_size = 0
                continue
            chunk.append(encode_record(self._file_seq, item))
            self._file_seq += 1
            edits += 1
        written += self._write(chunk, sync=sync)
        if sync:
            self._count(edits, written, started)
        return edits, written

    def _count(self, edits: int, written: int, started: float) -> None:
        elapsed = self._monotonic() - started
        stats = self.stats
        stats.edits += edits
        stats.syncs += 1
        stats.bytes += written
        stats.sync_seconds += elapsed
        stats.max_batch = max(stats.max_batch, edits)
        if elapsed >= self._slow_sync_s:
            log.warning("slow transaction-log sync: %d edits took %.3f s", edits, elapsed)

    def _write(self, chunk: list[bytes], *, sync: bool) -> int:
        """Write ``chunk`` (encoded records) to the current file as framed batches."""
        if not chunk:
            return 0
        writer = self._writer
        assert writer is not None
        marked, durable = self._durable_mark
        data = encode_frames(chunk, durable if marked is writer else 0)
        if self._file_size == 0:
            data = FILE_HEADER + data
        writer.write(data)
        self._file_size += len(data)
        if sync:
            # fsync before any waiter is released: an acknowledged edit must survive a crash.
            writer.sync()
            self._durable_mark = (writer, self._file_size)
        return len(data)


def _storage_error(exc: BaseException) -> TxStorageError:
    """``exc`` as the log's failure (an encoding bug must not leave waiters hanging)."""
    if isinstance(exc, TxStorageError):
        return exc
    error = TxStorageError(f"cannot write the transaction log: {exc!r}")
    error.__cause__ = exc
    return error
