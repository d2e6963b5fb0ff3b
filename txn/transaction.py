"""The ``Transaction`` value object and Tephra's visibility rules.

A transaction is a read snapshot (read pointer plus the excluded ids) and the write
pointer(s) it writes with. The rules below are Tephra's, verbatim in logic:

* ``is_visible(v)`` — ``v`` was committed before the snapshot (``v <= read_pointer`` and
  not excluded), or ``v`` is one of the transaction's own write pointers; under
  ``SNAPSHOT_EXCLUDE_CURRENT`` the current write pointer itself is not visible.
* ``visibility_upper_bound()`` — every id at or below it is either visible or excluded;
  readers may stop caring about anything older.

``invalids``, ``in_progress`` and ``checkpoint_write_pointers`` must be sorted ascending;
the manager guarantees it, and lookups use binary search.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from dataclasses import dataclass, replace

__all__ = [
    "ALL_VISIBLE_LATEST",
    "MAX_TX_PER_MS",
    "NO_TX_IN_PROGRESS",
    "Transaction",
    "TransactionType",
    "VisibilityLevel",
]

NO_TX_IN_PROGRESS = 2**63 - 1
"""Sentinel for "no transaction in progress" (Java's ``Long.MAX_VALUE``)."""

MAX_TX_PER_MS = 1_000_000
"""Write pointers are ``milliseconds * MAX_TX_PER_MS`` plus a counter."""


class TransactionType(enum.Enum):
    """Short transactions time out quickly; long ones are invalidated when aborted."""

    SHORT = "SHORT"
    LONG = "LONG"


class VisibilityLevel(enum.Enum):
    """Which of a transaction's own writes it sees."""

    SNAPSHOT = "SNAPSHOT"
    """The read snapshot plus all of the transaction's own write pointers."""
    SNAPSHOT_EXCLUDE_CURRENT = "SNAPSHOT_EXCLUDE_CURRENT"
    """As SNAPSHOT, but not the current write pointer (read earlier checkpoints only)."""
    SNAPSHOT_ALL = "SNAPSHOT_ALL"
    """As SNAPSHOT; storage layers return every visible version, delete markers included."""


def _contains(sorted_ids: tuple[int, ...], value: int) -> bool:
    i = bisect_left(sorted_ids, value)
    return i < len(sorted_ids) and sorted_ids[i] == value


@dataclass(frozen=True, slots=True, kw_only=True)
class Transaction:
    """A transaction as the manager hands it out; fields mirror Tephra's ``TTransaction``."""

    transaction_id: int
    read_pointer: int
    invalids: tuple[int, ...] = ()
    in_progress: tuple[int, ...] = ()
    first_short_in_progress: int = NO_TX_IN_PROGRESS
    type: TransactionType = TransactionType.SHORT
    write_pointer: int
    checkpoint_write_pointers: tuple[int, ...] = ()
    visibility_level: VisibilityLevel = VisibilityLevel.SNAPSHOT

    # -- derived views ---------------------------------------------------------------

    @property
    def first_in_progress(self) -> int:
        """The oldest in-progress id, or ``NO_TX_IN_PROGRESS``."""
        return self.in_progress[0] if self.in_progress else NO_TX_IN_PROGRESS

    def visibility_upper_bound(self) -> int:
        """Largest id at or below which everything is visible or excluded."""
        if not self.in_progress:
            return min(self.transaction_id - 1, self.read_pointer)
        return self.in_progress[0] - 1

    def is_in_progress(self, version: int) -> bool:
        return _contains(self.in_progress, version)

    def is_excluded(self, version: int) -> bool:
        """In progress or invalid when the snapshot was taken."""
        return _contains(self.in_progress, version) or _contains(self.invalids, version)

    def is_invalid(self, version: int) -> bool:
        return _contains(self.invalids, version)

    def is_checkpoint(self, version: int) -> bool:
        return _contains(self.checkpoint_write_pointers, version)

    def is_current_write(self, version: int) -> bool:
        """One of the transaction's own write pointers (id, current, or a checkpoint)."""
        return version in (self.write_pointer, self.transaction_id) or _contains(
            self.checkpoint_write_pointers, version
        )

    def is_visible(self, version: int) -> bool:
        """Whether data written with ``version`` is visible to this transaction."""
        if version <= self.read_pointer and not self.is_excluded(version):
            return True
        return self.is_current_write(version) and (
            self.visibility_level is not VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT
            or version != self.write_pointer
        )

    @property
    def has_excludes(self) -> bool:
        return bool(self.invalids) or bool(self.in_progress)

    @property
    def excludes_size(self) -> int:
        return len(self.invalids) + len(self.in_progress)

    def with_visibility(self, level: VisibilityLevel) -> Transaction:
        """A copy reading at another visibility level."""
        return replace(self, visibility_level=level)

    def __str__(self) -> str:
        return (
            f"Transaction{{readPointer: {self.read_pointer}, transactionId: "
            f"{self.transaction_id}, writePointer: {self.write_pointer}, invalids: "
            f"{list(self.invalids)}, inProgress: {list(self.in_progress)}, "
            f"firstShortInProgress: {self.first_short_in_progress}, type: {self.type.value}, "
            f"checkpointWritePointers: {list(self.checkpoint_write_pointers)}, "
            f"visibilityLevel: {self.visibility_level.value}}}"
        )


ALL_VISIBLE_LATEST = Transaction(
    transaction_id=NO_TX_IN_PROGRESS,
    read_pointer=NO_TX_IN_PROGRESS,
    first_short_in_progress=NO_TX_IN_PROGRESS,
    write_pointer=NO_TX_IN_PROGRESS,
)
"""A transaction that sees every committed version (Tephra's ``ALL_VISIBLE_LATEST``)."""
