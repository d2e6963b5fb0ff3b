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

``pipeline`` exposes the same operations without the wait, returning a ``Durable`` with
the ticket to wait for; an event-loop server uses it to answer when the log listener says
the ticket is durable instead of blocking a thread per call.

Lifecycle: ``start()`` recovers (newest snapshot + later logs), opens a new log, writes a
first snapshot if none exists, and starts the timeout and snapshot threads; ``stop()``
stops them and writes a final snapshot. A log failure moves the manager to FAILED: every
later call raises ``ManagerNotRunningError``.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from txn.clock import SYSTEM_CLOCK, Clock
from txn.config import ClientIdRetention, TxConfig
from txn.conflicts import change_key_repr
from txn.errors import (
    InvalidArgumentError,
    InvalidTruncateTimeError,
    ManagerNotRunningError,
    SnapshotUnavailableError,
    TransactionConflictError,
    TransactionNotInProgressError,
    TransactionSizeError,
    TxStorageError,
)
from txn.machine import TxStateMachine
from txn.periodic import PeriodicTask
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_changes
from txn.persist.store import TransactionStateStore
from txn.persist.wal import SyncListener, UnsyncedWrite, WriteAheadLog
from txn.state import InProgressType, TransactionSnapshot, expiration_from_write_pointer
from txn.transaction import Transaction, TransactionType

__all__ = ["DEFAULT_CLIENT_ID", "Durable", "ManagerState", "TransactionManager"]

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_CLIENT_ID = "unknown"
_ENCODE_AHEAD = 1024
"""Change sets at least this large are encoded for the log by the calling thread."""
_CHUNK = 65_536


def _key_set(keys: Collection[bytes]) -> frozenset[bytes]:
    """``keys`` as a set of ``bytes``; a huge collection is hashed in chunks, so other
    threads get the GIL in between (one C call would hold it throughout)."""
    if len(keys) <= _CHUNK:
        return frozenset(map(bytes, keys))
    seq = keys if isinstance(keys, list | tuple) else list(keys)
    result: set[bytes] = set()
    for i in range(0, len(seq), _CHUNK):
        result.update(map(bytes, seq[i : i + _CHUNK]))
    return frozenset(result)


class ManagerState(enum.Enum):
    NEW = "NEW"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class Durable(Generic[T]):
    """An operation's result, valid once log ticket ``ticket`` is durable."""

    value: T
    ticket: int


class TransactionManager:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        config: TxConfig | None = None,
        store: TransactionStateStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config or TxConfig()
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot_lock = threading.Lock()
        self._m = TxStateMachine()
        self._state = ManagerState.NEW
        self._wal: WriteAheadLog | None = None
        self._last_snapshot_ms = 0
        self._tasks: list[PeriodicTask] = []
        self.pipeline = Pipeline(self)

    # -- lifecycle --------------------------------------------------------------------

    @property
    def state(self) -> ManagerState:
        return self._state

    @property
    def clock(self) -> Clock:
        return self._clock

    def start(self) -> None:
        """Recover and start serving. Raises ``TxStorageError``/``CorruptStateError``."""
        with self._lock:
            if self._state is not ManagerState.NEW:
                raise ManagerNotRunningError(f"cannot start a manager that is {self._state.name}")
            if self._store is not None:
                self._store.open()
                try:
                    self._recover(self._store)
                    log_ts = self._next_file_timestamp()
                    self._wal = WriteAheadLog(self._store, slow_sync_s=self.config.slow_sync_s)
                    self._wal.add_listener(self._on_sync)
                    self._wal.open(log_ts)
                except BaseException:
                    self._state = ManagerState.FAILED
                    self._store.close()
                    raise
            if self._m.last_write_pointer == 0:
                self._m.last_write_pointer = self._m.next_write_pointer(self._clock.now_ms())
                self._m.read_pointer = self._m.last_write_pointer
            self._state = ManagerState.RUNNING
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
                self._state = ManagerState.STOPPED
                return
            failed = self._state is ManagerState.FAILED
            self._state = ManagerState.STOPPING
        for task in self._tasks:
            task.stop()
        self._tasks.clear()
        try:
            if self._wal is not None and not failed:
                self._write_snapshot(closing=True)
        finally:
            with self._lock:
                self._state = ManagerState.STOPPED
            if self._wal is not None:
                try:
                    self._wal.close()
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
            self._m.apply(edit, cfg.long_timeout_s)
            edits += 1
        log.info(
            "recovered transaction state: snapshot %s, %d log edits, %d in progress, %d invalid",
            since or "none",
            edits,
            len(self._m.in_progress),
            len(self._m.invalid),
        )

    def _on_sync(self, _ticket: int, failure: BaseException | None) -> None:
        if failure is not None:
            self._state = ManagerState.FAILED

    def _next_file_timestamp(self) -> int:
        """A timestamp for a new snapshot/log, strictly above every existing one."""
        ts = self._clock.now_ms()
        floor = self._last_snapshot_ms
        if self._wal is not None:
            floor = max(floor, self._wal.current_timestamp_ms)
        elif self._store is not None:
            floor = max([floor, *self._store.log_timestamps()])
        return max(ts, floor + 1)

    def _ensure_running(self) -> None:
        if self._state is not ManagerState.RUNNING:
            raise ManagerNotRunningError("Transaction Manager is not running.")

    def _log(self, edit: TransactionEdit) -> int:
        return self._wal.append(edit) if self._wal is not None else 0

    def _barrier(self) -> int:
        return self._wal.last_appended if self._wal is not None else 0

    # -- durability -------------------------------------------------------------------

    def wait_durable(self, ticket: int) -> None:
        """Block until log ticket ``ticket`` is durable (raises ``TxStorageError``)."""
        if self._wal is not None and ticket > 0:
            self._wal.wait(ticket)

    def add_sync_listener(self, listener: SyncListener) -> bool:
        """Get told (on the flushing thread) when tickets become durable. False without
        a log."""
        if self._wal is None:
            return False
        self._wal.add_listener(listener)
        return True

    def barrier(self) -> int:
        """The ticket covering everything done so far."""
        return self._barrier()

    def flush_log(self) -> int | None:
        """Flush queued edits on the calling thread (see ``WriteAheadLog.flush``);
        the durable ticket, or None when another thread is flushing."""
        return self._wal.flush() if self._wal is not None else 2**62

    def start_flush(self) -> UnsyncedWrite | None:
        """Lead a flush without its fsync (``WriteAheadLog.start_flush``); None when
        there is nothing to flush, no log, or another thread is flushing."""
        return self._wal.start_flush() if self._wal is not None else None

    def finish_flush(self, write: UnsyncedWrite, failure: BaseException | None) -> None:
        """End a flush ``start_flush`` began, once its file is synced (or failed to)."""
        assert self._wal is not None
        self._wal.finish_flush(write, failure)

    def has_unflushed(self) -> bool:
        """Edits are queued that no flush has taken yet."""
        return self._wal is not None and self._wal.has_pending

    def synced_ticket(self) -> int:
        """The highest durable ticket (everything, when there is no log)."""
        return self._wal.synced if self._wal is not None else 2**62

    def _call(self, op: Callable[[], Durable[T]]) -> T:
        try:
            result = op()
        except Exception:
            self.wait_durable(self._barrier())
            raise
        self.wait_durable(result.ticket)
        return result.value

    # -- operations (synchronous, durable) --------------------------------------------

    def start_short(
        self, timeout_s: int | None = None, client_id: str | None = DEFAULT_CLIENT_ID
    ) -> Transaction:
        """Start a short transaction; ``timeout_s`` defaults to the configured one."""
        return self._call(lambda: self._start_short(timeout_s, client_id))

    def start_long(self, client_id: str | None = DEFAULT_CLIENT_ID) -> Transaction:
        """Start a long transaction (no conflict detection; abort invalidates it)."""
        return self._call(lambda: self._start_long(client_id))

    def can_commit(self, tx_id: int, changes: Iterable[bytes]) -> None:
        """Record ``changes`` (replacing any earlier set) after checking for conflicts."""
        self._call(lambda: self._can_commit(tx_id, changes))

    def commit(self, tx_id: int, write_pointer: int) -> None:
        """Commit; re-checks conflicts against sets committed since ``can_commit``."""
        self._call(lambda: self._commit(tx_id, write_pointer))

    def abort(self, tx: Transaction) -> None:
        """Abort: a short transaction is forgotten, a long one invalidated. Never raises
        for unknown or already finished transactions."""
        self._call(lambda: self._abort(tx))

    def invalidate(self, tx_id: int) -> bool:
        """Move an in-progress transaction to the invalid list; False if committed/unknown."""
        return self._call(lambda: self._invalidate(tx_id))

    def checkpoint(self, tx: Transaction) -> Transaction:
        """A new write pointer for ``tx``, keeping its read snapshot."""
        return self._call(lambda: self._checkpoint(tx))

    def extend_timeout(self, tx_id: int, timeout_s: int) -> int:
        """Let short transaction ``tx_id`` run ``timeout_s`` seconds from now (never
        shorter than before, never past ``max_lifetime_s`` after its start); returns its
        expiration (ms, this manager's clock). A lease: its holder calls it again before
        the expiration, and the transaction times out soon after the holder is gone. Not
        Tephra's (an extension method)."""
        return self._call(lambda: self._extend_timeout(tx_id, timeout_s))

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> bool:
        """Remove ids from the invalid list; True if it changed."""
        return self._call(lambda: self._truncate_invalid_tx(tx_ids))

    def truncate_invalid_tx_before(self, time_ms: int) -> bool:
        """Remove invalid ids started before ``time_ms``; refused while older
        transactions are in progress."""
        return self._call(lambda: self._truncate_invalid_tx_before(time_ms))

    def invalid_size(self) -> int:
        return self._call(lambda: self._query(lambda: len(self._m.invalid)))

    def excluded_size(self) -> int:
        return self._call(
            lambda: self._query(lambda: len(self._m.invalid) + len(self._m.in_progress))
        )

    def get_snapshot(self) -> TransactionSnapshot:
        """The whole state now (raises ``SnapshotUnavailableError`` when not running)."""
        return self._call(self._get_snapshot)

    def status(self) -> str:
        """``"OK"`` while running, else ``"NOTOK"`` (Tephra's status strings)."""
        return "OK" if self._state is ManagerState.RUNNING else "NOTOK"

    # -- operation bodies (state change + queued edit, no waiting) --------------------

    def _start_short(self, timeout_s: int | None, client_id: str | None) -> Durable[Transaction]:
        if client_id is None:
            raise InvalidArgumentError("clientId must not be null")
        timeout = self.config.default_timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be positive but is {timeout} seconds")
        if timeout > self.config.max_timeout_s:
            raise InvalidArgumentError(
                f"timeout must not exceed {self.config.max_timeout_s} seconds "
                f"but is {timeout} seconds"
            )
        return self._start(timeout, TransactionType.SHORT, client_id)

    def _start_long(self, client_id: str | None) -> Durable[Transaction]:
        if client_id is None:
            raise InvalidArgumentError("clientId must not be null")
        return self._start(self.config.long_timeout_s, TransactionType.LONG, client_id)

    def _start(
        self, timeout_s: int, tx_type: TransactionType, client_id: str
    ) -> Durable[Transaction]:
        m = self._m
        keep_client = (
            client_id if self.config.retain_client_id is not ClientIdRetention.OFF else None
        )
        with self._lock:
            self._ensure_running()
            now = self._clock.now_ms()
            expiration = now + timeout_s * 1000
            tx_id = m.next_write_pointer(now)
            tx = m.create_transaction(tx_id, tx_type)
            vub = tx.visibility_upper_bound()
            m.do_start(tx_id, vub, expiration, tx_type, keep_client)
            ticket = self._log(TransactionEdit.started(tx_id, vub, expiration, tx_type))
        return Durable(tx, ticket)

    def _not_in_progress(self, tx_id: int, template: str) -> TransactionNotInProgressError:
        message = template % tx_id
        if tx_id in self._m.invalid:
            message += " (it is known to be invalid)"
        return TransactionNotInProgressError(message)

    def _validate_changes(self, tx_id: int, changes: Collection[bytes]) -> None:
        """Tephra's change-set limits, on the keys as sent (a duplicate counts twice),
        checked before they are hashed or held any longer."""
        cfg = self.config
        count = len(changes)
        if count > cfg.changeset_count_limit:
            raise TransactionSizeError(
                f"Change set for transaction {tx_id} has {count} entries and exceeds the limit "
                f"of {cfg.changeset_count_limit}"
            )
        if count > cfg.changeset_count_warn:
            log.warning("change set of transaction %d has %d entries", tx_id, count)
        size = sum(map(len, changes))
        if size > cfg.changeset_size_limit:
            raise TransactionSizeError(
                f"Change set for transaction {tx_id} has total size of {size} bytes and exceeds "
                f"the limit of {cfg.changeset_size_limit} bytes"
            )
        if size > cfg.changeset_size_warn:
            log.warning("change set of transaction %d has %d bytes", tx_id, size)

    def _raise_if_conflict(self, tx_id: int, changes: frozenset[bytes]) -> None:
        conflict = self._m.committed.find_conflict(tx_id, changes)
        if conflict is not None:
            key, client = conflict
            key_text = change_key_repr(key)
            raise TransactionConflictError(
                f"Transaction {tx_id} conflicts with {client or 'unknown client'} "
                f"on change key '{key_text}'",
                transaction_id=tx_id,
                conflicting_key=key_text,
                conflicting_client=client,
            )

    def _can_commit(self, tx_id: int, changes: Iterable[bytes]) -> Durable[None]:
        # The expensive part — checking the limits, hashing the keys, encoding a large set
        # for the log — happens before the state lock, so a huge change set delays only
        # its own caller (the server runs large calls on a worker thread).
        keys = changes if isinstance(changes, Collection) else list(changes)
        m = self._m
        if tx_id in m.in_progress:  # unlocked peek: "not in progress" is reported first
            self._validate_changes(tx_id, keys)
        change_set = _key_set(keys)
        encoded = encode_changes(change_set) if len(change_set) >= _ENCODE_AHEAD else None
        with self._lock:
            self._ensure_running()
            entry = m.in_progress.get(tx_id)
            if entry is None:
                raise self._not_in_progress(
                    tx_id, "canCommit() is called for transaction %d that is not in progress"
                )
            self._raise_if_conflict(tx_id, change_set)
            keep = (
                entry.client_id
                if self.config.retain_client_id is ClientIdRetention.COMMITTED
                else None
            )
            m.do_committing(tx_id, change_set, keep, encoded)
            ticket = self._log(TransactionEdit.committing(tx_id, change_set, encoded))
        return Durable(None, ticket)

    def _commit(self, tx_id: int, write_pointer: int) -> Durable[None]:
        del write_pointer  # the manager knows the transaction's write pointers (see machine.py)
        m = self._m
        with self._lock:
            self._ensure_running()
            commit_pointer = m.last_write_pointer + 1
            if tx_id not in m.in_progress:
                # Tephra words the commit-time message exactly like the canCommit one.
                raise self._not_in_progress(
                    tx_id, "canCommit() is called for transaction %d that is not in progress"
                )
            committing = m.committing.get(tx_id)
            changes: frozenset[bytes] = frozenset()
            encoded = None
            if committing is not None:
                changes, encoded = committing.changes, committing.encoded
                self._raise_if_conflict(tx_id, changes)
            m.do_commit(tx_id, changes, commit_pointer, committing is not None)
            ticket = self._log(
                TransactionEdit.committed(
                    tx_id, changes, commit_pointer, committing is not None, encoded
                )
            )
        return Durable(None, ticket)

    def _abort(self, tx: Transaction) -> Durable[None]:
        with self._lock:
            self._ensure_running()
            self._m.do_abort(tx.transaction_id, tx.checkpoint_write_pointers, tx.type)
            ticket = self._log(
                TransactionEdit.aborted(tx.transaction_id, tx.type, tx.checkpoint_write_pointers)
            )
        return Durable(None, ticket)

    def _invalidate(self, tx_id: int) -> Durable[bool]:
        with self._lock:
            self._ensure_running()
            changed = self._m.do_invalidate(tx_id)
            ticket = self._log(TransactionEdit.invalid(tx_id))
        return Durable(changed, ticket)

    def _extend_timeout(self, tx_id: int, timeout_s: int) -> Durable[int]:
        if not 0 < timeout_s <= self.config.max_timeout_s:
            raise InvalidArgumentError(
                f"timeout must be in 1..{self.config.max_timeout_s} seconds, got {timeout_s}"
            )
        m = self._m
        with self._lock:
            self._ensure_running()
            entry = m.in_progress.get(tx_id)
            if entry is None:
                reason = " because it was invalidated" if tx_id in m.invalid else ""
                raise TransactionNotInProgressError(
                    f"Transaction {tx_id} is not in progress{reason}"
                )
            if entry.type is InProgressType.CHECKPOINT:
                raise InvalidArgumentError(f"{tx_id} is a checkpoint, not a transaction id")
            if entry.is_long_running:
                raise InvalidArgumentError("a long transaction has no timeout to extend")
            lifetime_end = expiration_from_write_pointer(tx_id, self.config.max_lifetime_s)
            wanted = min(self._clock.now_ms() + timeout_s * 1000, lifetime_end)
            if wanted <= entry.expiration_ms:
                return Durable(entry.expiration_ms, self._barrier())
            m.do_extend(tx_id, wanted)
            ticket = self._log(TransactionEdit.timeout_extended(tx_id, wanted))
        return Durable(wanted, ticket)

    def _checkpoint(self, tx: Transaction) -> Durable[Transaction]:
        m = self._m
        tx_id = tx.transaction_id
        with self._lock:
            self._ensure_running()
            if tx_id not in m.in_progress:
                if tx_id in m.invalid:
                    raise TransactionNotInProgressError(
                        f"Transaction {tx_id} is not in progress because it was invalidated"
                    )
                raise TransactionNotInProgressError(f"Transaction {tx_id} is not in progress")
            new_wp = m.next_write_pointer(self._clock.now_ms())
            m.do_checkpoint(new_wp, tx_id)
            checkpoints = m.in_progress[tx_id].checkpoint_write_pointers
            ticket = self._log(TransactionEdit.checkpoint(new_wp, tx_id))
        return Durable(
            replace(tx, write_pointer=new_wp, checkpoint_write_pointers=checkpoints), ticket
        )

    def _truncate_invalid_tx(self, tx_ids: Iterable[int]) -> Durable[bool]:
        ids = frozenset(int(i) for i in tx_ids)
        with self._lock:
            self._ensure_running()
            changed = self._m.do_truncate_invalid(ids)
            ticket = self._log(TransactionEdit.truncate_invalid(ids))
        return Durable(changed, ticket)

    def _truncate_invalid_tx_before(self, time_ms: int) -> Durable[bool]:
        with self._lock:
            self._ensure_running()
            if self._m.in_progress_before(time_ms * 1_000_000):
                raise InvalidTruncateTimeError(
                    f"Transactions started earlier than {time_ms} are in-progress"
                )
            changed = self._m.do_truncate_invalid_before(time_ms)
            ticket = self._log(TransactionEdit.truncate_invalid_before(time_ms))
        return Durable(changed, ticket)

    def _query(self, fn: Callable[[], T]) -> Durable[T]:
        with self._lock:
            self._ensure_running()
            return Durable(fn(), self._barrier())

    def _get_snapshot(self) -> Durable[TransactionSnapshot]:
        with self._lock:
            if self._state not in (ManagerState.RUNNING, ManagerState.STOPPING):
                raise SnapshotUnavailableError("Transaction manager could not get a snapshot.")
            return Durable(self._m.snapshot(self._next_file_timestamp()), self._barrier())

    # -- maintenance ------------------------------------------------------------------

    def expire_timed_out(self) -> list[int]:
        """Invalidate every transaction whose timeout has passed; return their ids."""
        with self._lock:
            if self._state is not ManagerState.RUNNING:
                return []
            expired = self._m.timed_out(self._clock.now_ms())
            ticket = 0
            for tx_id in expired:
                entry = self._m.in_progress.get(tx_id)
                log.info(
                    "transaction %d of client %r timed out; moved to the invalid list",
                    tx_id,
                    entry.client_id if entry else None,
                )
                self._m.do_invalidate(tx_id)
                ticket = self._log(TransactionEdit.invalid(tx_id))
        self.wait_durable(ticket)
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
        assert store is not None and self._wal is not None
        with self._lock:
            snapshot = self._m.snapshot(self._next_file_timestamp())
            if not closing:
                self._wal.roll(snapshot.timestamp_ms)
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
            self._state = ManagerState.FAILED
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
                last = self._m.next_write_pointer(self._clock.now_ms())
                self._m.clear()
                self._m.last_write_pointer = last
                self._m.read_pointer = last
                if self._store is None or self._wal is None:
                    return
                # Hold the lock until the empty state is on disk: the log written after the
                # roll must never be replayed over the pre-reset snapshot.
                snapshot = self._m.snapshot(self._next_file_timestamp())
                self._wal.roll(snapshot.timestamp_ms)
                self._persist_snapshot(self._store, snapshot)


class Pipeline:
    """The manager's operations without the durability wait (see the module docstring).

    Each returns a ``Durable``; the caller must not act on the value before the ticket is
    durable. Exceptions are raised directly; answer them after ``manager.barrier()``.
    """

    def __init__(self, manager: TransactionManager) -> None:
        self._mgr = manager

    def start_short(
        self, timeout_s: int | None = None, client_id: str | None = DEFAULT_CLIENT_ID
    ) -> Durable[Transaction]:
        return self._mgr._start_short(timeout_s, client_id)

    def start_long(self, client_id: str | None = DEFAULT_CLIENT_ID) -> Durable[Transaction]:
        return self._mgr._start_long(client_id)

    def can_commit(self, tx_id: int, changes: Iterable[bytes]) -> Durable[None]:
        return self._mgr._can_commit(tx_id, changes)

    def commit(self, tx_id: int, write_pointer: int) -> Durable[None]:
        return self._mgr._commit(tx_id, write_pointer)

    def abort(self, tx: Transaction) -> Durable[None]:
        return self._mgr._abort(tx)

    def invalidate(self, tx_id: int) -> Durable[bool]:
        return self._mgr._invalidate(tx_id)

    def checkpoint(self, tx: Transaction) -> Durable[Transaction]:
        return self._mgr._checkpoint(tx)

    def extend_timeout(self, tx_id: int, timeout_s: int) -> Durable[int]:
        return self._mgr._extend_timeout(tx_id, timeout_s)

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> Durable[bool]:
        return self._mgr._truncate_invalid_tx(tx_ids)

    def truncate_invalid_tx_before(self, time_ms: int) -> Durable[bool]:
        return self._mgr._truncate_invalid_tx_before(time_ms)

    def invalid_size(self) -> Durable[int]:
        m = self._mgr._m
        return self._mgr._query(lambda: len(m.invalid))
