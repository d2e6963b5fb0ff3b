"""``FreshReady``: the queue messages that became ready within one writer batch, in
delivery order (``tms.queue_batch``; the store does not show them until the write).

A receive takes the first ``limit`` of them in (priority, due time, id) order without
sorting all of them each time: a heap of entries, pushed whenever a message becomes
ready and checked against the current row when popped (a message leased, removed or
made ready again since has a stale entry, dropped then). Membership changes go through
the batch's ``Journal``, so a failed operation's ``restore`` takes them back; the heap
is not journalled but rebuilt from the members after a restore (``reset``).
"""

from __future__ import annotations

import heapq

from tms.codec.queue import QueueRow
from tms.journal import Journal

__all__ = ["FreshReady"]


class FreshReady:
    """See the module docstring. Not thread-safe (one writer batch)."""

    __slots__ = ("_journal", "_order", "_rows")

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._rows: dict[bytes, QueueRow] = {}
        self._order: list[tuple[int, int, bytes]] | None = []  # None: rebuild

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self._rows

    def put(self, row: QueueRow) -> None:
        """``row`` became ready (again) in this batch."""
        self._journal.put(self._rows, row.id, row)
        if self._order is not None:
            heapq.heappush(self._order, (row.priority, row.due_ms, row.id))

    def drop(self, message_id: bytes) -> None:
        """The message is not ready any more (or not at all)."""
        self._journal.drop(self._rows, message_id)

    def reset(self) -> None:
        """After the journal was undone: the order is rebuilt on the next ``take``."""
        self._order = None

    def take(self, limit: int) -> list[QueueRow]:
        """Up to ``limit`` of them, first in delivery order; each one the caller does not
        then lease must be given back with ``give_back``."""
        order = self._order
        if order is None:
            order = [(r.priority, r.due_ms, r.id) for r in self._rows.values()]
            heapq.heapify(order)
            self._order = order
        rows: dict[bytes, QueueRow] = {}
        while order and len(rows) < limit:
            priority, due, message_id = heapq.heappop(order)
            row = self._rows.get(message_id)
            if row is not None and (row.priority, row.due_ms) == (priority, due):
                rows[message_id] = row  # a stale or repeated entry is dropped
        return list(rows.values())

    def give_back(self, rows: list[QueueRow]) -> None:
        """Of the rows ``take`` returned, the ones still ready go back in the order."""
        order = self._order
        if order is not None:
            for row in rows:
                if self._rows.get(row.id) is row:
                    heapq.heappush(order, (row.priority, row.due_ms, row.id))
