"""Change-set conflict detection.

A transaction conflicts when a change set committed *after it started* (commit pointer
greater than its id) shares a key with its own. Commit pointers are
``last_write_pointer + 1`` at commit time, so two commits without a start in between share
a pointer and their sets are merged.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

from txn.state import ChangeSet

__all__ = ["CommittedChangeSets", "change_key_repr"]

_PRINTABLE = frozenset(
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    b"`~!@#$%^&*()-_=+[]{}|;:'\",.<>/? "
)


def change_key_repr(key: bytes) -> str:
    """A change key as Tephra prints it (HBase ``Bytes.toStringBinary``)."""
    return "".join(chr(b) if b in _PRINTABLE else f"\\x{b:02X}" for b in key)


class CommittedChangeSets:
    """Change sets of committed transactions, keyed by commit pointer.

    Not thread-safe: the manager's lock guards it.
    """

    __slots__ = ("_pointers", "_sets")

    def __init__(self) -> None:
        self._pointers: list[int] = []
        self._sets: dict[int, ChangeSet] = {}

    def __len__(self) -> int:
        return len(self._pointers)

    def add(self, commit_pointer: int, changes: frozenset[bytes], client_id: str | None) -> None:
        """Record a committed set; merge with one already at ``commit_pointer``."""
        existing = self._sets.get(commit_pointer)
        if existing is None:
            if not self._pointers or commit_pointer > self._pointers[-1]:
                self._pointers.append(commit_pointer)
            else:
                insort(self._pointers, commit_pointer)
            self._sets[commit_pointer] = ChangeSet(changes, client_id)
        else:
            self._sets[commit_pointer] = ChangeSet(existing.changes | changes, client_id)

    def find_conflict(
        self, tx_id: int, changes: frozenset[bytes]
    ) -> tuple[bytes, str | None] | None:
        """The first (key, committing client) committed after ``tx_id`` started, or None."""
        if not changes:
            return None
        for pointer in self._pointers[bisect_right(self._pointers, tx_id) :]:
            committed = self._sets[pointer]
            common = committed.changes & changes
            if common:
                return min(common), committed.client_id
        return None

    def remove_below(self, bound: int) -> None:
        """Drop sets with commit pointer ``< bound``: no running transaction can conflict."""
        cut = bisect_left(self._pointers, bound)
        if cut:
            for pointer in self._pointers[:cut]:
                del self._sets[pointer]
            del self._pointers[:cut]

    def clear(self) -> None:
        self._pointers.clear()
        self._sets.clear()

    def items(self) -> Iterator[tuple[int, ChangeSet]]:
        """(commit pointer, change set) in ascending pointer order."""
        for pointer in self._pointers:
            yield pointer, self._sets[pointer]
