"""The manager's in-memory state and its primitive transitions (pure: no locks, I/O or
clock): the ``StateMachine`` contract, its Python implementation ``TxStateMachine``, and
``replay``.

Live calls and log replay go through the same transitions, so replaying the edits a run
wrote over its starting snapshot reproduces its state exactly. ``replay(machine, edit)``
is the replay side; the ``do_*`` methods are what the manager calls live. The native
engine keeps the same state in C (``txn.native.machine.NativeStateMachine``); a
differential test holds the two to the same answers.

Where Tephra's live path and its replay path disagree we follow the replay path, so
that live and recovered state are equal (see docs/txn.md, "Deviations"):

* a commit that fails its conflict re-check keeps the committing change set;
* a commit moves the read pointer to the transaction id or its last checkpoint, never to
  a caller-supplied write pointer;
* a short abort removes the checkpoints the manager recorded, not caller-supplied ones;
* an abort moves the read pointer only for ids the manager has handed out;
* a timeout invalidates exactly as ``invalidate`` does (the read pointer may move).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import replace
from typing import Protocol

from txn.conflicts import CommittedChangeSets
from txn.errors import CorruptStateError
from txn.invalid_list import InvalidTxList
from txn.persist.edit import EditState, TransactionEdit
from txn.state import (
    ChangeSet,
    InProgressTx,
    InProgressType,
    TransactionSnapshot,
    expiration_from_write_pointer,
    resolve_legacy_types,
)
from txn.transaction import NO_TX_IN_PROGRESS, Transaction, TransactionType

__all__ = ["StateMachine", "TxStateMachine", "replay"]

_IN_PROGRESS_TYPE = {
    TransactionType.SHORT: InProgressType.SHORT,
    TransactionType.LONG: InProgressType.LONG,
}


class StateMachine(Protocol):
    """The manager's state: read pointer, last write pointer, in-progress entries (one per
    write pointer; checkpoints are entries of their own), the invalid list, committing
    and committed change sets.

    Not thread-safe: the manager's state lock guards every call. Transitions never fail
    half-way: they change the state completely or (on a bug or corrupt replay input)
    raise before changing it. Queries return immutable values.
    """

    @property
    def read_pointer(self) -> int: ...

    @property
    def last_write_pointer(self) -> int: ...

    def next_write_pointer(self, now_ms: int) -> int:
        """``max(last write pointer + 1, now_ms * 1e6)`` (does not take it)."""
        ...

    def create_transaction(self, tx_id: int, tx_type: TransactionType) -> Transaction:
        """The snapshot a transaction starting now with id ``tx_id`` reads from."""
        ...

    def entry(self, wp: int) -> InProgressTx | None:
        """The in-progress entry of write pointer ``wp``, or None."""
        ...

    def in_progress_ids(self) -> tuple[int, ...]:
        """The in-progress write pointers, ascending (checkpoints included)."""
        ...

    def in_progress_count(self) -> int: ...

    def invalid_count(self) -> int: ...

    def is_invalid(self, tx_id: int) -> bool: ...

    def committing_changes(self, tx_id: int) -> ChangeSet | None:
        """The change set ``tx_id`` declared (can_commit), or None."""
        ...

    def find_conflict(
        self, tx_id: int, changes: frozenset[bytes]
    ) -> tuple[bytes, str | None] | None:
        """The smallest key of ``changes`` in a set committed after ``tx_id`` started
        (the first such set, by commit pointer), and that set's client; None if none."""
        ...

    def first_short_in_progress(self) -> int:
        """The oldest in-progress id that is not long-running (checkpoints count)."""
        ...

    def in_progress_before(self, write_pointer: int) -> bool:
        """Whether some in-progress id is ``< write_pointer``."""
        ...

    def timed_out(self, now_ms: int) -> list[int]:
        """Parent transactions whose expiration has passed (negative: expired)."""
        ...

    def snapshot(self, timestamp_ms: int) -> TransactionSnapshot: ...

    def reset(self, pointer: int) -> None:
        """Forget every transaction; both pointers become ``pointer``."""

    def restore(
        self, snapshot: TransactionSnapshot, long_timeout_s: int, tolerance_ms: int
    ) -> None:
        """Replace the state with ``snapshot``'s (typeless entries resolved)."""

    def do_start(
        self,
        wp: int,
        visibility_upper_bound: int,
        expiration_ms: int,
        tx_type: TransactionType,
        client_id: str | None,
    ) -> None: ...

    def do_committing(
        self,
        tx_id: int,
        changes: frozenset[bytes],
        client_id: str | None,
        encoded: bytes | None = None,
    ) -> None:
        """``encoded``: the keys as ``edit_codec.encode_changes`` wrote them, if known."""

    def do_commit(
        self, tx_id: int, changes: frozenset[bytes], commit_pointer: int, add_to_committed: bool
    ) -> None: ...

    def do_abort(
        self, tx_id: int, checkpoints: tuple[int, ...] | None, tx_type: TransactionType | None
    ) -> None: ...

    def do_invalidate(self, tx_id: int) -> bool:
        """False (nothing changed) for committed or unknown transactions."""
        ...

    def do_checkpoint(self, new_wp: int, parent_wp: int) -> None:
        """Raises ``CorruptStateError`` when the parent is not in progress."""

    def do_extend(self, tx_id: int, expiration_ms: int) -> None:
        """Set the expiration of in-progress transaction ``tx_id`` (a checkpoint, or a
        transaction no longer in progress, is left alone)."""

    def do_truncate_invalid(self, ids: Iterable[int]) -> bool: ...

    def do_truncate_invalid_before(self, time_ms: int) -> bool: ...


class TxStateMachine:
    """See ``StateMachine``: the state in Python dicts, lists and sets."""

    def __init__(self) -> None:
        self.clear()

    @property
    def read_pointer(self) -> int:
        return self._read_pointer

    @property
    def last_write_pointer(self) -> int:
        return self._last_write_pointer

    def clear(self) -> None:
        """Forget everything (pointers back to 0)."""
        self._read_pointer = 0
        self._last_write_pointer = 0
        self._in_progress: dict[int, InProgressTx] = {}
        self._ids: list[int] = []  # in-progress ids, ascending
        self._ids_tuple: tuple[int, ...] | None = ()
        self._invalid = InvalidTxList()
        self._committing: dict[int, ChangeSet] = {}
        self._committed = CommittedChangeSets()

    # -- queries ----------------------------------------------------------------------

    def in_progress_ids(self) -> tuple[int, ...]:
        """In-progress ids ascending (shared, immutable)."""
        if self._ids_tuple is None:
            self._ids_tuple = tuple(self._ids)
        return self._ids_tuple

    def first_short_in_progress(self) -> int:
        """The oldest in-progress id that is not long-running (checkpoints count)."""
        entries = self._in_progress
        for wp in self._ids:
            if not entries[wp].is_long_running:
                return wp
        return NO_TX_IN_PROGRESS

    def next_write_pointer(self, now_ms: int) -> int:
        return max(self._last_write_pointer + 1, now_ms * 1_000_000)

    def entry(self, wp: int) -> InProgressTx | None:
        """The in-progress entry of write pointer ``wp``, or None."""
        return self._in_progress.get(wp)

    def in_progress_count(self) -> int:
        return len(self._in_progress)

    def invalid_count(self) -> int:
        return len(self._invalid)

    def is_invalid(self, tx_id: int) -> bool:
        return tx_id in self._invalid

    def committing_changes(self, tx_id: int) -> ChangeSet | None:
        """The change set ``tx_id`` declared (can_commit), or None."""
        return self._committing.get(tx_id)

    def find_conflict(
        self, tx_id: int, changes: frozenset[bytes]
    ) -> tuple[bytes, str | None] | None:
        """The smallest key of ``changes`` in a set committed after ``tx_id`` started, and
        that set's client; None when there is none."""
        return self._committed.find_conflict(tx_id, changes)

    def reset(self, pointer: int) -> None:
        """Forget every transaction; both pointers become ``pointer``."""
        self.clear()
        self._read_pointer = self._last_write_pointer = pointer

    def create_transaction(self, tx_id: int, tx_type: TransactionType) -> Transaction:
        """The snapshot a transaction starting now with id ``tx_id`` reads from."""
        return Transaction(
            transaction_id=tx_id,
            read_pointer=self._read_pointer,
            invalids=self._invalid.sorted(),
            in_progress=self.in_progress_ids(),
            first_short_in_progress=self.first_short_in_progress(),
            type=tx_type,
            write_pointer=tx_id,
        )

    def snapshot(self, timestamp_ms: int) -> TransactionSnapshot:
        return TransactionSnapshot(
            timestamp_ms=timestamp_ms,
            read_pointer=self._read_pointer,
            write_pointer=self._last_write_pointer,
            invalid=self._invalid.sorted(),
            in_progress={wp: self._in_progress[wp] for wp in self._ids},
            committing={k: cs.changes for k, cs in sorted(self._committing.items())},
            committed={k: cs.changes for k, cs in self._committed.items()},
        )

    # -- in-progress bookkeeping ------------------------------------------------------

    def _add_in_progress(self, wp: int, entry: InProgressTx) -> None:
        if wp in self._in_progress:
            self._in_progress[wp] = entry
            return
        self._in_progress[wp] = entry
        if not self._ids or wp > self._ids[-1]:
            self._ids.append(wp)
        else:
            insort(self._ids, wp)
        self._ids_tuple = None
        self._last_write_pointer = max(self._last_write_pointer, wp)

    def _remove_in_progress(self, wp: int) -> InProgressTx | None:
        entry = self._in_progress.pop(wp, None)
        if entry is not None:
            del self._ids[bisect_left(self._ids, wp)]
            self._ids_tuple = None
        return entry

    def _move_read_pointer(self, wp: int) -> None:
        self._read_pointer = max(self._read_pointer, wp)

    # -- transitions ------------------------------------------------------------------

    def do_start(
        self,
        wp: int,
        visibility_upper_bound: int,
        expiration_ms: int,
        tx_type: TransactionType,
        client_id: str | None,
    ) -> None:
        self._add_in_progress(
            wp,
            InProgressTx(
                visibility_upper_bound, expiration_ms, _IN_PROGRESS_TYPE[tx_type], (), client_id
            ),
        )

    def do_committing(
        self,
        tx_id: int,
        changes: frozenset[bytes],
        client_id: str | None,
        encoded: bytes | None = None,
    ) -> None:
        self._committing[tx_id] = ChangeSet(changes, client_id, encoded)

    def do_commit(
        self, tx_id: int, changes: frozenset[bytes], commit_pointer: int, add_to_committed: bool
    ) -> None:
        committing = self._committing.pop(tx_id, None)
        if add_to_committed and changes:
            client = committing.client_id if committing is not None else None
            self._committed.add(commit_pointer, changes, client)
        wp = tx_id
        previous = self._remove_in_progress(tx_id)
        if previous is None:
            self._invalid.remove(tx_id)  # a timed-out transaction committed during replay
        elif previous.checkpoint_write_pointers:
            wp = previous.checkpoint_write_pointers[-1]
            for cp in previous.checkpoint_write_pointers:
                self._remove_in_progress(cp)
        self._move_read_pointer(wp)
        self._committed.remove_below(self.first_short_in_progress())

    def do_abort(
        self, tx_id: int, checkpoints: tuple[int, ...] | None, tx_type: TransactionType | None
    ) -> None:
        self._committing.pop(tx_id, None)
        if tx_type is TransactionType.LONG:
            self.do_invalidate(tx_id)
            return
        removed = self._remove_in_progress(tx_id)
        if removed is not None:
            for cp in removed.checkpoint_write_pointers:
                self._remove_in_progress(cp)
        elif self._invalid.remove(tx_id):
            # the transaction and its checkpoints were invalidated together
            for cp in checkpoints or ():
                self._invalid.remove(cp)
        if tx_id <= self._last_write_pointer:
            self._move_read_pointer(tx_id)

    def do_invalidate(self, tx_id: int) -> bool:
        previous_changes = self._committing.pop(tx_id, None)
        previous = self._remove_in_progress(tx_id)
        if previous is None and previous_changes is None:
            return False  # committed or unknown: never invalidate those
        self._invalid.add(tx_id)
        if previous is not None:
            for cp in previous.checkpoint_write_pointers:
                self._invalid.add(cp)
                self._remove_in_progress(cp)
            if not previous.is_long_running:
                self._move_read_pointer(tx_id)
        return True

    def do_checkpoint(self, new_wp: int, parent_wp: int) -> None:
        parent = self._in_progress.get(parent_wp)
        if parent is None:
            raise CorruptStateError(
                f"checkpoint {new_wp} of transaction {parent_wp}, which is not in progress"
            )
        self._in_progress[parent_wp] = replace(
            parent, checkpoint_write_pointers=(*parent.checkpoint_write_pointers, new_wp)
        )
        self._add_in_progress(
            new_wp,
            InProgressTx(
                parent.visibility_upper_bound,
                parent.expiration_ms,
                InProgressType.CHECKPOINT,
                (),
                parent.client_id,
            ),
        )

    def do_extend(self, tx_id: int, expiration_ms: int) -> None:
        entry = self._in_progress.get(tx_id)
        if entry is not None and entry.type is not InProgressType.CHECKPOINT:
            self._in_progress[tx_id] = replace(entry, expiration_ms=expiration_ms)

    def do_truncate_invalid(self, ids: Iterable[int]) -> bool:
        return self._invalid.remove_all(ids)

    def in_progress_before(self, write_pointer: int) -> bool:
        """Whether some in-progress id is ``< write_pointer``."""
        return bool(self._ids) and self._ids[0] < write_pointer

    def do_truncate_invalid_before(self, time_ms: int) -> bool:
        return self._invalid.remove_below(time_ms * 1_000_000)

    def timed_out(self, now_ms: int) -> list[int]:
        """Ids of parent transactions whose expiration has passed (negative = expired)."""
        return [
            wp
            for wp, e in self._in_progress.items()
            if e.type is not InProgressType.CHECKPOINT
            and (e.expiration_ms < 0 or now_ms > e.expiration_ms)
        ]

    # -- whole-state operations -------------------------------------------------------

    def restore(
        self, snapshot: TransactionSnapshot, long_timeout_s: int, tolerance_ms: int
    ) -> None:
        """Replace the state with ``snapshot``'s (client ids are not persisted)."""
        self.clear()
        self._read_pointer = snapshot.read_pointer
        self._last_write_pointer = snapshot.write_pointer
        self._invalid = InvalidTxList(snapshot.invalid)
        entries = resolve_legacy_types(snapshot.in_progress, long_timeout_s, tolerance_ms)
        self._in_progress = dict(sorted(entries.items()))
        self._ids = list(self._in_progress)
        self._ids_tuple = None
        self._committing = {k: ChangeSet(v) for k, v in snapshot.committing.items()}
        for pointer, changes in snapshot.committed.items():
            self._committed.add(pointer, changes, None)


def replay(machine: StateMachine, edit: TransactionEdit, long_timeout_s: int) -> None:
    """Replay one log edit on ``machine`` (Tephra's ``replayLogs`` rules)."""
    state = edit.state
    wp = edit.write_pointer
    if state is EditState.INPROGRESS:
        expiration = edit.expiration_ms
        tx_type = edit.type
        if expiration < 0:
            expiration = expiration_from_write_pointer(wp, long_timeout_s)
            tx_type = TransactionType.LONG
        elif tx_type is None:
            tx_type = TransactionType.SHORT
        machine.do_start(wp, edit.visibility_upper_bound, expiration, tx_type, None)
    elif state is EditState.COMMITTING:
        machine.do_committing(wp, edit.changes, None)
    elif state is EditState.COMMITTED:
        machine.do_commit(wp, edit.changes, edit.commit_pointer, edit.can_commit)
    elif state is EditState.INVALID:
        machine.do_invalidate(wp)
    elif state is EditState.ABORTED:
        tx_type = edit.type
        if tx_type is None:  # edits of codec V2 carry no type
            entry = machine.entry(wp)
            if entry is None:
                machine.do_invalidate(wp)
                return
            if entry.type is InProgressType.CHECKPOINT:
                return
            tx_type = TransactionType.LONG if entry.is_long_running else TransactionType.SHORT
        machine.do_abort(wp, edit.checkpoint_pointers, tx_type)
    elif state is EditState.TRUNCATE_INVALID_TX:
        if edit.truncate_invalid_tx_time != 0:
            machine.do_truncate_invalid_before(edit.truncate_invalid_tx_time)
        else:
            machine.do_truncate_invalid(edit.truncate_invalid_tx)
    elif state is EditState.CHECKPOINT:
        machine.do_checkpoint(wp, edit.parent_write_pointer)
    elif state is EditState.TIMEOUT_EXTENDED:
        machine.do_extend(wp, edit.expiration_ms)
    else:
        raise CorruptStateError(f"Invalid state for WAL entry: {state.name}")
