"""``NativeStateMachine``: ``txn.machine.TxStateMachine``'s contract over the state kept in
C (``txn.native._core.Machine``), which the native server's hot calls change directly.

The C type speaks ints, tuples, bytes and frozensets; this adapter turns them into the
``txn`` value objects. Same transitions, same answers (a differential test runs both
machines through random operation sequences and compares every answer and snapshot).
"""

from __future__ import annotations

from collections.abc import Iterable

from txn.errors import CorruptStateError
from txn.native._core import Machine
from txn.state import (
    ChangeSet,
    InProgressTx,
    InProgressType,
    TransactionSnapshot,
    resolve_legacy_types,
)
from txn.transaction import Transaction, TransactionType

__all__ = ["NativeStateMachine"]

_TYPE = {TransactionType.SHORT: 0, TransactionType.LONG: 1}
_KINDS = tuple(InProgressType)  # by value: SHORT, LONG, CHECKPOINT


def _entry(t: tuple[int, int, int, int, tuple[int, ...], str | None]) -> InProgressTx:
    return InProgressTx(t[1], t[2], _KINDS[t[3]], t[4], t[5])


class NativeStateMachine:
    """See ``txn.machine.TxStateMachine``. ``core`` is the C state the native server uses."""

    __slots__ = ("core",)

    def __init__(self) -> None:
        self.core = Machine()

    # -- queries ----------------------------------------------------------------------

    @property
    def read_pointer(self) -> int:
        return int(self.core.read_pointer)

    @property
    def last_write_pointer(self) -> int:
        return int(self.core.last_write_pointer)

    def next_write_pointer(self, now_ms: int) -> int:
        return int(self.core.next_write_pointer(now_ms))

    def create_transaction(self, tx_id: int, tx_type: TransactionType) -> Transaction:
        read_pointer, invalids, in_progress, first_short = self.core.view()
        return Transaction(
            transaction_id=tx_id,
            read_pointer=read_pointer,
            invalids=invalids,
            in_progress=in_progress,
            first_short_in_progress=first_short,
            type=tx_type,
            write_pointer=tx_id,
        )

    def entry(self, wp: int) -> InProgressTx | None:
        found = self.core.entry(wp)
        return None if found is None else _entry(found)

    def in_progress_ids(self) -> tuple[int, ...]:
        return tuple(self.core.view()[2])

    def in_progress_count(self) -> int:
        return int(self.core.counts()[0])

    def invalid_count(self) -> int:
        return int(self.core.counts()[1])

    def is_invalid(self, tx_id: int) -> bool:
        return bool(self.core.is_invalid(tx_id))

    def committing_changes(self, tx_id: int) -> ChangeSet | None:
        found = self.core.committing(tx_id)
        return None if found is None else ChangeSet(*found)

    def find_conflict(
        self, tx_id: int, changes: frozenset[bytes]
    ) -> tuple[bytes, str | None] | None:
        found = self.core.find_conflict(tx_id, changes)
        return None if found is None else (found[0], found[1])

    def first_short_in_progress(self) -> int:
        return int(self.core.first_short())

    def in_progress_before(self, write_pointer: int) -> bool:
        return bool(self.core.in_progress_before(write_pointer))

    def timed_out(self, now_ms: int) -> list[int]:
        return list(self.core.timed_out(now_ms))

    def snapshot(self, timestamp_ms: int) -> TransactionSnapshot:
        read_pointer, write_pointer, invalid, entries, committing, committed = self.core.export()
        return TransactionSnapshot(
            timestamp_ms=timestamp_ms,
            read_pointer=read_pointer,
            write_pointer=write_pointer,
            invalid=invalid,
            in_progress={e[0]: _entry(e) for e in entries},
            committing=dict(committing),
            committed=dict(committed),
        )

    # -- transitions ------------------------------------------------------------------

    def reset(self, pointer: int) -> None:
        self.core.reset(pointer)

    def clear(self) -> None:
        self.core.reset(0)

    def do_start(
        self,
        wp: int,
        visibility_upper_bound: int,
        expiration_ms: int,
        tx_type: TransactionType,
        client_id: str | None,
    ) -> None:
        self.core.do_start(wp, visibility_upper_bound, expiration_ms, _TYPE[tx_type], client_id)

    def do_committing(
        self,
        tx_id: int,
        changes: frozenset[bytes],
        client_id: str | None,
        encoded: bytes | None = None,
    ) -> None:
        self.core.do_committing(tx_id, changes, client_id, encoded)

    def do_commit(
        self, tx_id: int, changes: frozenset[bytes], commit_pointer: int, add_to_committed: bool
    ) -> None:
        self.core.do_commit(tx_id, changes, commit_pointer, add_to_committed)

    def do_abort(
        self, tx_id: int, checkpoints: tuple[int, ...] | None, tx_type: TransactionType | None
    ) -> None:
        self.core.do_abort(tx_id, checkpoints, -1 if tx_type is None else _TYPE[tx_type])

    def do_invalidate(self, tx_id: int) -> bool:
        return bool(self.core.do_invalidate(tx_id))

    def do_checkpoint(self, new_wp: int, parent_wp: int) -> None:
        if not self.core.do_checkpoint(new_wp, parent_wp):
            raise CorruptStateError(
                f"checkpoint {new_wp} of transaction {parent_wp}, which is not in progress"
            )

    def do_extend(self, tx_id: int, expiration_ms: int) -> None:
        self.core.do_extend(tx_id, expiration_ms)

    def do_truncate_invalid(self, ids: Iterable[int]) -> bool:
        return bool(self.core.do_truncate_invalid(ids))

    def do_truncate_invalid_before(self, time_ms: int) -> bool:
        return bool(self.core.do_truncate_invalid_before(time_ms))

    def restore(
        self, snapshot: TransactionSnapshot, long_timeout_s: int, tolerance_ms: int
    ) -> None:
        """Replace the state with ``snapshot``'s."""
        entries = resolve_legacy_types(snapshot.in_progress, long_timeout_s, tolerance_ms)
        self.core.restore(
            snapshot.read_pointer,
            snapshot.write_pointer,
            snapshot.invalid,
            [
                (
                    wp,
                    e.visibility_upper_bound,
                    e.expiration_ms,
                    _kind(e),
                    e.checkpoint_write_pointers,
                    e.client_id,
                )
                for wp, e in sorted(entries.items())
            ],
            sorted(snapshot.committing.items()),
            sorted(snapshot.committed.items()),
        )


def _kind(entry: InProgressTx) -> int:
    assert entry.type is not None  # resolve_legacy_types gave every entry one
    return int(entry.type.value)
