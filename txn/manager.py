"""``TransactionManager``: hands out transactions, detects conflicts, and makes every state
change durable before answering.

Call contract (every public operation):

* validates its arguments (``InvalidArgumentError``, ``TransactionSizeError``) before
  touching state;
* changes the in-memory state and queues the matching log edit under one lock, so log
  order is state-change order;
* returns only after that edit — and every edit queued before it — is fsynced. Concurrent
  calls share one fsync (group commit). Calls that change nothing (queries, and calls that
  raise) still wait for everything queued before them, so no answer ever reflects state a
  crash could take back.

``pipeline`` (``txn.operations.TxOperations``) exposes the same operations without the
wait, returning a ``Durable`` with the ticket to wait for; an event-loop server uses it to
answer when the log says the ticket is durable instead of blocking a thread per call.
Both go through one ``log`` (``txn.durability.DurableLog``): append under the state lock,
then flush, sync and release in ticket order. Which implementation keeps the state and
the log is the ``engine`` (``txn.engine``: Python, or the native one compiled from C).

Lifecycle: ``start()`` recovers (newest snapshot + later logs), opens a new log, writes a
first snapshot if none exists, and starts the timeout and snapshot threads; ``stop()``
stops them and writes a final snapshot. A log failure moves the manager to FAILED: every
later call raises ``ManagerNotRunningError``.
"""

from __future__ import annotations

import enum
import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TypeVar

from txms_common.clock import SYSTEM_CLOCK, Clock
from txms_common.periodic import PeriodicTask
from txn.config import TxConfig
from txn.durability import DurableLog, SyncListener
from txn.engine import Engine, StateLock, resolve
from txn.errors import ManagerNotRunningError, SnapshotUnavailableError, TxStorageError
from txn.machine import StateMachine, replay
from txn.operations import DEFAULT_CLIENT_ID, Durable, TxOperations
from txn.persist.edit import TransactionEdit
from txn.persist.store import TransactionStateStore
from txn.state import TransactionSnapshot, WritePointerState
from txn.transaction import Transaction

__all__ = ["DEFAULT_CLIENT_ID", "Durable", "ManagerState", "TransactionManager"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ManagerState(enum.Enum):
    NEW = "NEW"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class TransactionManager:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        config: TxConfig | None = None,
        store: TransactionStateStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        *,
        engine: Engine | None = None,
    ) -> None:
        """``engine`` defaults to the one ``config.engine`` names (``txn.engine``)."""
        self.config = config or TxConfig()
        self.engine = engine if engine is not None else resolve(self.config.engine)
        self._store = store
        self._clock = clock
        self._lock = self.engine.new_lock()
        self._snapshot_lock = threading.Lock()
        self._m = self.engine.new_machine()
        self._log = self.engine.new_log(store, self.config.slow_sync_s)
        self._log_open = False
        self._state = ManagerState.NEW
        self._watchers: list[Callable[[ManagerState], None]] = []
        self._watch_lock = threading.Lock()
        self._last_snapshot_ms = 0
        self._tasks: list[PeriodicTask] = []
        self.pipeline = TxOperations(
            self.config,
            clock=clock,
            lock=self._lock,
            machine=self._m,
            durable_log=self._log,
            running=self._is_running,
        )

    # -- lifecycle --------------------------------------------------------------------

    @property
    def state(self) -> ManagerState:
        return self._state

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def log(self) -> DurableLog:
        """The durable pipeline every operation's edit goes through (see the module
        docstring)."""
        return self._log

    @property
    def machine(self) -> StateMachine:
        """The state; only with ``state_lock`` held (the native server's hot calls)."""
        return self._m

    @property
    def state_lock(self) -> StateLock:
        """Held while the state changes and its edit is queued (log order is state order).
        The native server's hot calls take it too."""
        return self._lock

    @property
    def store(self) -> TransactionStateStore | None:
        return self._store

    def watch_state(self, watcher: Callable[[ManagerState], None]) -> None:
        """Call ``watcher`` with the state now, then on every transition, in order, before
        the transition's method returns (the native server mirrors the state into C). A
        watcher must be quick and must not call into this manager."""
        with self._watch_lock:
            self._watchers.append(watcher)
            watcher(self._state)

    def unwatch_state(self, watcher: Callable[[ManagerState], None]) -> None:
        """Stop calling ``watcher`` (one registration of it; none is a no-op)."""
        with self._watch_lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def _set_state(self, state: ManagerState) -> None:
        with self._watch_lock:
            self._state = state
            for watcher in self._watchers:
                watcher(state)

    def _is_running(self) -> bool:
        return self._state is ManagerState.RUNNING

    def start(self) -> None:
        """Recover and start serving. Raises ``TxStorageError``/``CorruptStateError``."""
        with self._lock:
            if self._state is not ManagerState.NEW:
                raise ManagerNotRunningError(f"cannot start a manager that is {self._state.name}")
            try:
                if self._store is not None:
                    self._store.open()
                    self._recover(self._store)
                log_ts = self._next_file_timestamp()
                self._log.add_listener(_weakly(self._on_sync), failures_only=True)
                self._log.open(log_ts)
                self._log_open = True
            except BaseException:
                self._set_state(ManagerState.FAILED)
                if self._store is not None:
                    self._store.close()
                raise
            if self._m.last_write_pointer == 0:  # no transaction ever: start at the clock
                self._m.reset(self._m.next_write_pointer(self._clock.now_ms()))
            self._set_state(ManagerState.RUNNING)
        if self._store is not None and self._last_snapshot_ms == 0:
            self.take_snapshot()
        cfg = self.config
        if cfg.cleanup_interval_s > 0:
            self._tasks.append(
                PeriodicTask("txn-expiry", cfg.cleanup_interval_s, self.expire_timed_out)
            )
        if self._store is not None and cfg.snapshot_interval_s > 0:
            self._tasks.append(
                PeriodicTask(
                    "txn-snapshot", cfg.snapshot_interval_s, self.take_snapshot, run_at_start=False
                )
            )
        for task in self._tasks:
            task.start()
        log.info(
            "transaction manager started (state in %s)",
            self._store.location if self._store else "memory",
        )

    def stop(self) -> None:
        """Stop the threads, write a final snapshot, close the log. Idempotent."""
        with self._lock:
            if self._state in (ManagerState.STOPPED, ManagerState.NEW):
                self._set_state(ManagerState.STOPPED)
                return
            failed = self._state is ManagerState.FAILED
            self._set_state(ManagerState.STOPPING)
        for task in self._tasks:
            task.stop()
        self._tasks.clear()
        try:
            if self._store is not None and not failed:
                self._write_snapshot(closing=True)
        finally:
            with self._lock:
                self._set_state(ManagerState.STOPPED)
            try:
                self._log.close()
            except TxStorageError:
                log.error("the transaction log had failed; the final snapshot was not written")
            if self._store is not None:
                self._store.close()
        log.info("transaction manager stopped")

    def _recover(self, store: TransactionStateStore) -> None:
        cfg = self.config
        snapshot = store.latest_snapshot()
        since = 0
        if snapshot is not None:
            self._m.restore(snapshot, cfg.long_timeout_s, cfg.long_timeout_tolerance_ms)
            self._last_snapshot_ms = snapshot.timestamp_ms
            since = snapshot.timestamp_ms
        edits = 0
        for edit in store.edits_since(since):
            replay(self._m, edit, cfg.long_timeout_s)
            edits += 1
        log.info(
            "recovered transaction state: snapshot %s, %d log edits, %d in progress, %d invalid",
            since or "none",
            edits,
            self._m.in_progress_count(),
            self._m.invalid_count(),
        )

    def _on_sync(self, _ticket: int, failure: BaseException | None) -> None:
        if failure is not None:
            self._set_state(ManagerState.FAILED)

    def _next_file_timestamp(self) -> int:
        """A timestamp for a new snapshot/log, strictly above every existing one."""
        ts = self._clock.now_ms()
        floor = self._last_snapshot_ms
        if self._log_open:
            floor = max(floor, self._log.current_timestamp_ms)
        elif self._store is not None:
            floor = max([floor, *self._store.log_timestamps()])
        return max(ts, floor + 1)

    def _ensure_running(self) -> None:
        if self._state is not ManagerState.RUNNING:
            raise ManagerNotRunningError("Transaction Manager is not running.")

    def _wait(self, ticket: int) -> None:
        """Block until ``ticket`` is durable (raises ``TxStorageError``)."""
        if ticket > 0:
            self._log.wait(ticket)

    def _call(self, op: Callable[[], Durable[T]]) -> T:
        try:
            result = op()
        except Exception:
            self._wait(self._log.last_appended)
            raise
        self._wait(result.ticket)
        return result.value

    # -- operations (synchronous, durable) --------------------------------------------

    def start_short(
        self, timeout_s: int | None = None, client_id: str | None = DEFAULT_CLIENT_ID
    ) -> Transaction:
        """Start a short transaction; ``timeout_s`` defaults to the configured one."""
        return self._call(lambda: self.pipeline.start_short(timeout_s, client_id))

    def start_long(self, client_id: str | None = DEFAULT_CLIENT_ID) -> Transaction:
        """Start a long transaction (no conflict detection; abort invalidates it)."""
        return self._call(lambda: self.pipeline.start_long(client_id))

    def can_commit(self, tx_id: int, changes: Iterable[bytes]) -> None:
        """Record ``changes`` (replacing any earlier set) after checking for conflicts."""
        self._call(lambda: self.pipeline.can_commit(tx_id, changes))

    def commit(self, tx_id: int, write_pointer: int) -> None:
        """Commit; re-checks conflicts against sets committed since ``can_commit``."""
        self._call(lambda: self.pipeline.commit(tx_id, write_pointer))

    def abort(self, tx: Transaction) -> None:
        """Abort: a short transaction is forgotten, a long one invalidated. Never raises
        for unknown or already finished transactions."""
        self._call(lambda: self.pipeline.abort(tx))

    def invalidate(self, tx_id: int) -> bool:
        """Move an in-progress transaction to the invalid list; False if committed/unknown."""
        return self._call(lambda: self.pipeline.invalidate(tx_id))

    def checkpoint(self, tx: Transaction) -> Transaction:
        """A new write pointer for ``tx``, keeping its read snapshot."""
        return self._call(lambda: self.pipeline.checkpoint(tx))

    def extend_timeout(self, tx_id: int, timeout_s: int) -> int:
        """Let short transaction ``tx_id`` run ``timeout_s`` seconds from now (never
        shorter than before, never past ``max_lifetime_s`` after its start); returns its
        expiration (ms, this manager's clock). A lease: its holder calls it again before
        the expiration, and the transaction times out soon after the holder is gone. Not
        Tephra's (an extension method)."""
        return self._call(lambda: self.pipeline.extend_timeout(tx_id, timeout_s))

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> bool:
        """Remove ids from the invalid list; True if it changed."""
        return self._call(lambda: self.pipeline.truncate_invalid_tx(tx_ids))

    def truncate_invalid_tx_before(self, time_ms: int) -> bool:
        """Remove invalid ids started before ``time_ms``; refused while older
        transactions are in progress."""
        return self._call(lambda: self.pipeline.truncate_invalid_tx_before(time_ms))

    def invalid_size(self) -> int:
        return self._call(self.pipeline.invalid_size)

    def excluded_size(self) -> int:
        return self._call(
            lambda: self.pipeline.query(lambda m: m.invalid_count() + m.in_progress_count())
        )

    def write_pointer_state(
        self, pointers: Iterable[int] = (), durable: bool = False
    ) -> WritePointerState:
        """The in-progress pointers now, the newest pointer issued, and which of
        ``pointers`` are invalid; read-only (no log edit).

        By default answered at once, without waiting for edits still on their way to the
        log: a client holds a write pointer only after its start was durable, so what it
        may write under is never answered from state the log could lose; an answer about
        a change not yet durable (a commit, an invalidation) errs towards refusing. That
        is the answer for a *writer's* check (``tms.guard``), never for a *reader*: a
        pointer it shows finished may be a commit that a crash before the next sync
        loses. ``durable=True`` is the reader's answer: the same state, returned once
        every edit appended before it was read is durable, so a pointer it shows
        committed stays committed after any crash (it waits for the log's next sync)."""
        answer = self.pipeline.write_pointer_state(pointers, durable)
        self._wait(answer.ticket)  # ticket 0 (not durable): at once
        return answer.value

    def get_snapshot(self) -> TransactionSnapshot:
        """The whole state now (raises ``SnapshotUnavailableError`` when not running)."""
        return self._call(self._get_snapshot)

    def status(self) -> str:
        """``"OK"`` while running, else ``"NOTOK"`` (Tephra's status strings)."""
        return "OK" if self._state is ManagerState.RUNNING else "NOTOK"

    # -- queries ---------------------------------------------------------------------

    def _get_snapshot(self) -> Durable[TransactionSnapshot]:
        with self._lock:
            if self._state not in (ManagerState.RUNNING, ManagerState.STOPPING):
                raise SnapshotUnavailableError("Transaction manager could not get a snapshot.")
            return Durable(self._m.snapshot(self._next_file_timestamp()), self._log.last_appended)

    # -- maintenance ------------------------------------------------------------------

    def expire_timed_out(self) -> list[int]:
        """Invalidate every transaction whose timeout has passed; return their ids."""
        with self._lock:
            if self._state is not ManagerState.RUNNING:
                return []
            expired = self._m.timed_out(self._clock.now_ms())
            ticket = 0
            for tx_id in expired:
                entry = self._m.entry(tx_id)
                log.info(
                    "transaction %d of client %r timed out; moved to the invalid list",
                    tx_id,
                    entry.client_id if entry else None,
                )
                self._m.do_invalidate(tx_id)
                ticket = self._log.append(TransactionEdit.invalid(tx_id))
        self._wait(ticket)
        return expired

    def take_snapshot(self) -> bool:
        """Write a snapshot now and roll the log; False when there is no storage or the
        manager is not running."""
        if self._store is None or self._state is not ManagerState.RUNNING:
            return False
        self._write_snapshot(closing=False)
        return True

    def _write_snapshot(self, *, closing: bool) -> None:
        with self._snapshot_lock:
            self._write_snapshot_locked(closing=closing)

    def _write_snapshot_locked(self, *, closing: bool) -> None:
        """Capture the state and roll the log atomically, then write the snapshot.
        Requires ``_snapshot_lock``."""
        store = self._store
        assert store is not None
        with self._lock:
            snapshot = self._m.snapshot(self._next_file_timestamp())
            if not closing:
                self._log.roll(snapshot.timestamp_ms)
        self._persist_snapshot(store, snapshot)

    def _persist_snapshot(
        self, store: TransactionStateStore, snapshot: TransactionSnapshot
    ) -> None:
        try:
            store.write_snapshot(snapshot)
            self._last_snapshot_ms = snapshot.timestamp_ms
            oldest = store.delete_old_snapshots(self.config.snapshot_retain)
            store.delete_logs_older_than(oldest)
        except TxStorageError:
            log.critical("writing snapshot %d failed; stopping the manager", snapshot.timestamp_ms)
            self._set_state(ManagerState.FAILED)
            raise

    def reset_state(self) -> None:
        """Snapshot (for the record), forget all transactions, snapshot the empty state.

        Write pointers keep growing across a reset (Tephra would restart them from the
        clock), so ids never repeat.
        """
        with self._snapshot_lock:
            if self._store is not None:
                self._write_snapshot_locked(closing=False)
            with self._lock:
                self._ensure_running()
                self._m.reset(self._m.next_write_pointer(self._clock.now_ms()))
                if self._store is None:
                    return
                # Hold the lock until the empty state is on disk: the log written after the
                # roll must never be replayed over the pre-reset snapshot.
                snapshot = self._m.snapshot(self._next_file_timestamp())
                self._log.roll(snapshot.timestamp_ms)
                self._persist_snapshot(self._store, snapshot)


def _weakly(method: SyncListener) -> SyncListener:
    """``method`` (a bound method) called through a weak reference, so the log a manager
    listens to does not keep the manager alive: manager → log → listener → manager would
    be a cycle through the native log's C type, which the collector cannot see into, and
    every manager would leak its log (and the log's descriptors)."""
    ref = weakref.WeakMethod(method)

    def listener(ticket: int, failure: BaseException | None) -> None:
        target = ref()
        if target is not None:
            target(ticket, failure)

    return listener
