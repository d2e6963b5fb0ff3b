"""``Journal``: changes to in-memory dicts and sets that can be taken back, newest first
(an operation that fails part way undoes what it changed: ``tms.queue_batch``)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

__all__ = ["Journal"]

_ABSENT = object()  # the key was not in the table
_ADDED = object()  # the member was added to the set


class Journal:
    """Records how to undo each change made through it since the last ``clear``: one
    (table, key, value before) per change, cheap to record (the undo is rare)."""

    __slots__ = ("_undo",)

    def __init__(self) -> None:
        self._undo: list[tuple[Any, Hashable, object]] = []

    def put(self, table: dict[Any, Any], key: Hashable, value: object) -> None:
        """``table[key] = value``."""
        self._undo.append((table, key, table.get(key, _ABSENT)))
        table[key] = value

    def drop(self, table: dict[Any, Any], key: Hashable) -> None:
        """``table.pop(key, None)``."""
        if key in table:
            self._undo.append((table, key, table.pop(key)))

    def add(self, members: set[Any], member: Hashable) -> None:
        """``members.add(member)``."""
        if member not in members:
            self._undo.append((members, member, _ADDED))
            members.add(member)

    def clear(self) -> None:
        """Keep every change so far."""
        self._undo.clear()

    def undo(self) -> None:
        """Take back every change since ``clear``, newest first."""
        while self._undo:
            table, key, before = self._undo.pop()
            if before is _ADDED:
                table.discard(key)
            elif before is _ABSENT:
                del table[key]
            else:
                table[key] = before
