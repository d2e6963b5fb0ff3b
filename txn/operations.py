"""``TxOperations``: the manager's operations without the durability wait.

Each validates its arguments, then — under the state lock — checks the manager is
running, changes the state (``txn.machine.StateMachine``) and queues the matching edit
(``txn.durability.DurableLog``), and returns a ``Durable``: the value and the log ticket
that must be durable before the caller acts on it (answers a client, returns). An error
is raised directly; answer it once ``barrier()`` is durable, since it may depend on state
that is not yet. ``TransactionManager`` waits for the ticket; the Thrift servers park the
reply until the log releases it.

The native server runs the hot three (start, can-commit, commit) in C with the same
rules for the success case, and hands every other case to these (txn/native/src/hot.c).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from txms_common.clock import Clock
from txn.config import ClientIdRetention, TxConfig
from txn.conflicts import change_key_repr
from txn.durability import DurableLog
from txn.engine import StateLock
from txn.errors import (
    InvalidArgumentError,
    InvalidTruncateTimeError,
    ManagerNotRunningError,
    TransactionConflictError,
    TransactionNotInProgressError,
    TransactionSizeError,
)
from txn.machine import StateMachine
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_changes
from txn.state import InProgressType, WritePointerState, expiration_from_write_pointer
from txn.transaction import Transaction, TransactionType

__all__ = ["DEFAULT_CLIENT_ID", "Durable", "TxOperations"]

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_CLIENT_ID = "unknown"
_ENCODE_AHEAD = 1024
"""Change sets at least this large are encoded for the log by the calling thread."""
_CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class Durable(Generic[T]):
    """An operation's result, valid once log ticket ``ticket`` is durable."""

    value: T
    ticket: int


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


class TxOperations:
    """See the module docstring. Thread-safe (the state lock serialises them)."""

    def __init__(
        self,
        config: TxConfig,
        *,
        clock: Clock,
        lock: StateLock,
        machine: StateMachine,
        durable_log: DurableLog,
        running: Callable[[], bool],
    ) -> None:
        self._config = config
        self._clock = clock
        self._lock = lock
        self._m = machine
        self._log = durable_log
        self._running = running

    def _ensure_running(self) -> None:
        if not self._running():
            raise ManagerNotRunningError("Transaction Manager is not running.")

    def barrier(self) -> int:
        """The ticket covering everything done so far."""
        return self._log.last_appended

    # -- starting ---------------------------------------------------------------------

    def start_short(
        self, timeout_s: int | None = None, client_id: str | None = DEFAULT_CLIENT_ID
    ) -> Durable[Transaction]:
        if client_id is None:
            raise InvalidArgumentError("clientId must not be null")
        cfg = self._config
        timeout = cfg.default_timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be positive but is {timeout} seconds")
        if timeout > cfg.max_timeout_s:
            raise InvalidArgumentError(
                f"timeout must not exceed {cfg.max_timeout_s} seconds but is {timeout} seconds"
            )
        return self._start(timeout, TransactionType.SHORT, client_id)

    def start_long(self, client_id: str | None = DEFAULT_CLIENT_ID) -> Durable[Transaction]:
        if client_id is None:
            raise InvalidArgumentError("clientId must not be null")
        return self._start(self._config.long_timeout_s, TransactionType.LONG, client_id)

    def _start(
        self, timeout_s: int, tx_type: TransactionType, client_id: str
    ) -> Durable[Transaction]:
        m = self._m
        keep = client_id if self._config.retain_client_id is not ClientIdRetention.OFF else None
        with self._lock:
            self._ensure_running()
            now = self._clock.now_ms()
            expiration = now + timeout_s * 1000
            tx_id = m.next_write_pointer(now)
            tx = m.create_transaction(tx_id, tx_type)
            vub = tx.visibility_upper_bound()
            m.do_start(tx_id, vub, expiration, tx_type, keep)
            ticket = self._log.append(TransactionEdit.started(tx_id, vub, expiration, tx_type))
        return Durable(tx, ticket)

    # -- committing -------------------------------------------------------------------

    def _not_in_progress(self, tx_id: int, template: str) -> TransactionNotInProgressError:
        message = template % tx_id
        if self._m.is_invalid(tx_id):
            message += " (it is known to be invalid)"
        return TransactionNotInProgressError(message)

    def _validate_changes(self, tx_id: int, changes: Collection[bytes]) -> None:
        """Tephra's change-set limits, on the keys as sent (a duplicate counts twice),
        checked before they are hashed or held any longer."""
        cfg = self._config
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
        conflict = self._m.find_conflict(tx_id, changes)
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

    def can_commit(self, tx_id: int, changes: Iterable[bytes]) -> Durable[None]:
        # The expensive part — checking the limits, hashing the keys, encoding a large set
        # for the log — happens before the state lock, so a huge change set delays only
        # its own caller (the server runs large calls on a worker thread).
        keys = changes if isinstance(changes, Collection) else list(changes)
        m = self._m
        if m.entry(tx_id) is not None:  # unlocked peek: "not in progress" is reported first
            self._validate_changes(tx_id, keys)
        change_set = _key_set(keys)
        encoded = encode_changes(change_set) if len(change_set) >= _ENCODE_AHEAD else None
        with self._lock:
            self._ensure_running()
            entry = m.entry(tx_id)
            if entry is None:
                raise self._not_in_progress(
                    tx_id, "canCommit() is called for transaction %d that is not in progress"
                )
            self._raise_if_conflict(tx_id, change_set)
            keep = (
                entry.client_id
                if self._config.retain_client_id is ClientIdRetention.COMMITTED
                else None
            )
            m.do_committing(tx_id, change_set, keep, encoded)
            ticket = self._log.append(TransactionEdit.committing(tx_id, change_set, encoded))
        return Durable(None, ticket)

    def commit(self, tx_id: int, write_pointer: int) -> Durable[None]:
        del write_pointer  # the manager knows the transaction's write pointers (see machine.py)
        m = self._m
        with self._lock:
            self._ensure_running()
            commit_pointer = m.last_write_pointer + 1
            if m.entry(tx_id) is None:
                # Tephra words the commit-time message exactly like the canCommit one.
                raise self._not_in_progress(
                    tx_id, "canCommit() is called for transaction %d that is not in progress"
                )
            committing = m.committing_changes(tx_id)
            changes: frozenset[bytes] = frozenset()
            encoded = None
            if committing is not None:
                changes, encoded = committing.changes, committing.encoded
                self._raise_if_conflict(tx_id, changes)
            m.do_commit(tx_id, changes, commit_pointer, committing is not None)
            ticket = self._log.append(
                TransactionEdit.committed(
                    tx_id, changes, commit_pointer, committing is not None, encoded
                )
            )
        return Durable(None, ticket)

    # -- the rest of a transaction's life ---------------------------------------------

    def abort(self, tx: Transaction) -> Durable[None]:
        with self._lock:
            self._ensure_running()
            self._m.do_abort(tx.transaction_id, tx.checkpoint_write_pointers, tx.type)
            ticket = self._log.append(
                TransactionEdit.aborted(tx.transaction_id, tx.type, tx.checkpoint_write_pointers)
            )
        return Durable(None, ticket)

    def invalidate(self, tx_id: int) -> Durable[bool]:
        with self._lock:
            self._ensure_running()
            changed = self._m.do_invalidate(tx_id)
            ticket = self._log.append(TransactionEdit.invalid(tx_id))
        return Durable(changed, ticket)

    def checkpoint(self, tx: Transaction) -> Durable[Transaction]:
        m = self._m
        tx_id = tx.transaction_id
        with self._lock:
            self._ensure_running()
            if m.entry(tx_id) is None:
                if m.is_invalid(tx_id):
                    raise TransactionNotInProgressError(
                        f"Transaction {tx_id} is not in progress because it was invalidated"
                    )
                raise TransactionNotInProgressError(f"Transaction {tx_id} is not in progress")
            new_wp = m.next_write_pointer(self._clock.now_ms())
            m.do_checkpoint(new_wp, tx_id)
            entry = m.entry(tx_id)
            assert entry is not None
            ticket = self._log.append(TransactionEdit.checkpoint(new_wp, tx_id))
        return Durable(
            replace(
                tx, write_pointer=new_wp, checkpoint_write_pointers=entry.checkpoint_write_pointers
            ),
            ticket,
        )

    def extend_timeout(self, tx_id: int, timeout_s: int) -> Durable[int]:
        """See ``TransactionManager.extend_timeout``."""
        cfg = self._config
        if not 0 < timeout_s <= cfg.max_timeout_s:
            raise InvalidArgumentError(
                f"timeout must be in 1..{cfg.max_timeout_s} seconds, got {timeout_s}"
            )
        m = self._m
        with self._lock:
            self._ensure_running()
            entry = m.entry(tx_id)
            if entry is None:
                reason = " because it was invalidated" if m.is_invalid(tx_id) else ""
                raise TransactionNotInProgressError(
                    f"Transaction {tx_id} is not in progress{reason}"
                )
            if entry.type is InProgressType.CHECKPOINT:
                raise InvalidArgumentError(f"{tx_id} is a checkpoint, not a transaction id")
            if entry.is_long_running:
                raise InvalidArgumentError("a long transaction has no timeout to extend")
            lifetime_end = expiration_from_write_pointer(tx_id, cfg.max_lifetime_s)
            wanted = min(self._clock.now_ms() + timeout_s * 1000, lifetime_end)
            if wanted <= entry.expiration_ms:
                return Durable(entry.expiration_ms, self.barrier())
            m.do_extend(tx_id, wanted)
            ticket = self._log.append(TransactionEdit.timeout_extended(tx_id, wanted))
        return Durable(wanted, ticket)

    # -- the invalid list ---------------------------------------------------------------

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> Durable[bool]:
        ids = frozenset(int(i) for i in tx_ids)
        with self._lock:
            self._ensure_running()
            changed = self._m.do_truncate_invalid(ids)
            ticket = self._log.append(TransactionEdit.truncate_invalid(ids))
        return Durable(changed, ticket)

    def truncate_invalid_tx_before(self, time_ms: int) -> Durable[bool]:
        with self._lock:
            self._ensure_running()
            if self._m.in_progress_before(time_ms * 1_000_000):
                raise InvalidTruncateTimeError(
                    f"Transactions started earlier than {time_ms} are in-progress"
                )
            changed = self._m.do_truncate_invalid_before(time_ms)
            ticket = self._log.append(TransactionEdit.truncate_invalid_before(time_ms))
        return Durable(changed, ticket)

    def query(self, fn: Callable[[StateMachine], T]) -> Durable[T]:
        """``fn(state)`` under the lock, valid once everything before it is durable."""
        with self._lock:
            self._ensure_running()
            return Durable(fn(self._m), self._log.last_appended)

    def invalid_size(self) -> Durable[int]:
        return self.query(lambda m: m.invalid_count())

    def write_pointer_state(
        self, pointers: Iterable[int], durable: bool = False
    ) -> Durable[WritePointerState]:
        """The newest pointer issued, the in-progress ones, and which of ``pointers`` are
        invalid: valid at once (ticket 0), or with ``durable`` once everything appended
        before it is durable (see ``TransactionManager.write_pointer_state``)."""
        m = self._m
        with self._lock:
            self._ensure_running()
            state = WritePointerState(
                m.last_write_pointer,
                frozenset(m.in_progress_ids()),
                frozenset(p for p in pointers if m.is_invalid(p)),
            )
            ticket = self._log.last_appended if durable else 0
        return Durable(state, ticket)
