"""The durable pipeline: append → flush → sync → release, in ticket order.

``DurableLog`` is the one contract the manager, the in-process client and both Thrift
servers work against; three implementations:

* ``txn.persist.wal.WriteAheadLog``: the log files in Python (the Python engine), with a
  split flush so that the Thrift server can sync in helper processes;
* ``txn.native.log.NativeLog``: the same files written and synced in C (the native
  engine), so that its server appends and flushes without Python;
* ``NullLog`` (below): a manager without storage; everything is durable at once.

Contract:

* ``append(edit)`` is called **under the manager's state lock**, right after the state
  change it records, so log order is state-change order. It queues the edit (no I/O) and
  returns its ticket (1, 2, 3, ...). ``last_appended`` is the newest ticket: a barrier for
  answers that depend on state not yet durable (errors, queries).
* Release: a ticket is durable once a write and an ``fdatasync`` covering it — and every
  edit queued before it — have completed. ``synced`` is the highest durable ticket.
  ``wait(ticket)`` blocks a thread until then, leading a flush of everything queued when
  none is running (group commit: concurrent waiters share one sync). An event loop calls
  ``flush()`` instead (None: another thread is flushing and its listeners will say when
  it ends) and releases the replies the durable ticket covers, in order per connection.
* ``roll(timestamp)`` (under the state lock) starts ``txlog.<timestamp>``: edits queued
  before it go to the old file, later ones to the new one.
* A failed write or sync fails the log for good (a failed fsync cannot be retried
  safely): ``failure`` is set, every waiter present and future gets it, and nothing
  queued is ever reported durable. Listeners hear of it; the owner must stop serving.
* ``add_listener(listener)``: called after every flush; ``failures_only=True``: only after
  a flush that failed (the manager: a flush that succeeds then calls no Python at all on
  the native engine's hot path).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from txn.errors import TxStorageError
from txn.persist.edit import TransactionEdit

__all__ = ["DurableLog", "Listeners", "LogStats", "NullLog", "SyncListener"]

SyncListener = Callable[[int, BaseException | None], None]
"""Called after every flush with (highest durable ticket, failure or None), on the
thread that led it; keep it short."""

log = logging.getLogger(__name__)


class Listeners:
    """A log's sync listeners: those of every flush and those of failed flushes only."""

    def __init__(self) -> None:
        self._every: list[SyncListener] = []
        self._failures: list[SyncListener] = []

    def add(self, listener: SyncListener, failures_only: bool) -> None:
        (self._failures if failures_only else self._every).append(listener)

    def remove(self, listener: SyncListener) -> None:
        """Raises ``ValueError`` when ``listener`` was never added."""
        (self._every if listener in self._every else self._failures).remove(listener)

    def report(self, synced: int, failure: BaseException | None) -> None:
        """Call those that want to hear of this flush; a listener's exception is logged."""
        chosen = [*self._every, *self._failures] if failure is not None else list(self._every)
        for listener in chosen:
            try:
                listener(synced, failure)
            except Exception:
                log.exception("sync listener failed")


@dataclass
class LogStats:
    """Counters since the log was opened (benchmarks read them)."""

    edits: int = 0
    syncs: int = 0
    bytes: int = 0
    sync_seconds: float = 0.0
    max_batch: int = 0


class DurableLog(Protocol):
    """See the module docstring."""

    current_timestamp_ms: int
    """The timestamp of the file appends go to now."""

    @property
    def failure(self) -> TxStorageError | None: ...

    @property
    def last_appended(self) -> int: ...

    @property
    def synced(self) -> int: ...

    @property
    def has_pending(self) -> bool:
        """Edits are queued that no flush has taken yet."""
        ...

    @property
    def stats(self) -> LogStats: ...

    def open(self, timestamp_ms: int) -> None:
        """Create ``txlog.<timestamp_ms>`` and accept appends."""

    def close(self) -> None:
        """Make everything appended durable and close the file; raises the failure."""

    def append(self, edit: TransactionEdit) -> int: ...

    def roll(self, timestamp_ms: int) -> None: ...

    def wait(self, ticket: int, timeout_s: float | None = None) -> None:
        """Raises ``TxStorageError`` (failed) or ``TimeoutError``."""

    def flush(self) -> int | None: ...

    def add_listener(self, listener: SyncListener, *, failures_only: bool = False) -> None: ...

    def remove_listener(self, listener: SyncListener) -> None: ...


class NullLog:
    """A ``DurableLog`` kept nowhere: the state of a manager without storage, durable as
    soon as it is appended (there is nothing to lose it to but the process itself)."""

    def __init__(self) -> None:
        self.current_timestamp_ms = 0
        self._appended = 0
        self._listeners = Listeners()  # a log kept nowhere never fails: never called
        self.stats = LogStats()

    failure = None

    @property
    def last_appended(self) -> int:
        return self._appended

    @property
    def synced(self) -> int:
        return self._appended

    has_pending = False

    def open(self, timestamp_ms: int) -> None:
        self.current_timestamp_ms = timestamp_ms

    def close(self) -> None:
        pass

    def append(self, edit: TransactionEdit) -> int:
        self._appended += 1
        return self._appended

    def roll(self, timestamp_ms: int) -> None:
        self.current_timestamp_ms = timestamp_ms

    def wait(self, ticket: int, timeout_s: float | None = None) -> None:
        pass

    def flush(self) -> int:
        return self._appended

    def add_listener(self, listener: SyncListener, *, failures_only: bool = False) -> None:
        self._listeners.add(listener, failures_only)

    def remove_listener(self, listener: SyncListener) -> None:
        self._listeners.remove(listener)
