"""``Journal``: changes to in-memory dicts and sets that can be taken back, newest first
(an operation that fails part way undoes what it changed: ``tms.queue_batch``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

__all__ = ["Journal"]

_ABSENT = object()


class Journal:
    """Records how to undo each change made through it since the last ``clear``."""

    __slots__ = ("_undo",)

    def __init__(self) -> None:
        self._undo: list[Callable[[], object]] = []

    def put(self, table: dict[Any, Any], key: Hashable, value: object) -> None:
        """``table[key] = value``."""
        old = table.get(key, _ABSENT)
        undo = partial(table.pop, key) if old is _ABSENT else partial(table.__setitem__, key, old)
        self._undo.append(undo)
        table[key] = value

    def drop(self, table: dict[Any, Any], key: Hashable) -> None:
        """``table.pop(key, None)``."""
        if key in table:
            self._undo.append(partial(table.__setitem__, key, table.pop(key)))

    def add(self, members: set[Any], member: Hashable) -> None:
        """``members.add(member)``."""
        if member not in members:
            self._undo.append(partial(members.discard, member))
            members.add(member)

    def clear(self) -> None:
        """Keep every change so far."""
        self._undo.clear()

    def undo(self) -> None:
        """Take back every change since ``clear``, newest first."""
        while self._undo:
            self._undo.pop()()
