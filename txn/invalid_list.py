"""The invalid list: ids of transactions that failed or timed out and were not cleaned up.

Every transaction ships the sorted list, so the sorted tuple is cached and rebuilt only
when the list changes; all transactions started between two changes share one tuple.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["InvalidTxList"]


class InvalidTxList:
    """A set of invalid ids with a cached sorted view. Not thread-safe: the manager's
    lock guards it."""

    __slots__ = ("_ids", "_sorted")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._ids: set[int] = set(ids)
        self._sorted: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, tx_id: object) -> bool:
        return tx_id in self._ids

    def add(self, tx_id: int) -> bool:
        """Add ``tx_id``; return whether it was absent."""
        if tx_id in self._ids:
            return False
        self._ids.add(tx_id)
        self._sorted = None
        return True

    def remove(self, tx_id: int) -> bool:
        """Remove ``tx_id``; return whether it was present."""
        if tx_id not in self._ids:
            return False
        self._ids.remove(tx_id)
        self._sorted = None
        return True

    def remove_all(self, tx_ids: Iterable[int]) -> bool:
        """Remove every id given; return whether anything changed."""
        before = len(self._ids)
        self._ids.difference_update(tx_ids)
        if len(self._ids) != before:
            self._sorted = None
            return True
        return False

    def remove_below(self, bound: int) -> bool:
        """Remove every id ``< bound``; return whether anything changed."""
        return self.remove_all([i for i in self._ids if i < bound])

    def clear(self) -> None:
        self._ids.clear()
        self._sorted = None

    def sorted(self) -> tuple[int, ...]:
        """The ids in ascending order (shared, immutable)."""
        if self._sorted is None:
            self._sorted = tuple(sorted(self._ids))
        return self._sorted
