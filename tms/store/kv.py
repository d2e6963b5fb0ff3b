"""``KeyValueStore``: the ordered byte store the tables are built on.

Contract:

* keys and values are ``bytes``; keys order as unsigned bytes;
* ``write(puts, deletes, sync)`` applies all of it atomically: after a crash either every
  change is there or none; with ``sync=True`` it is durable when the call returns;
* ``scan(start, stop)`` yields ``(key, value)`` with ``start <= key < stop`` (``stop`` None:
  to the end), ascending, or descending with ``reverse=True``; it sees one consistent
  state, unaffected by writes made while it is being consumed;
* every method raises ``StorageUnavailableError`` when the medium fails or the store is
  closed.

A store holds several tables; ``table(name)`` is a view whose keys are the table's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

__all__ = ["KeyValueStore", "TableStore"]


class TableStore(Protocol):
    """One table of a ``KeyValueStore``."""

    def get(self, key: bytes) -> bytes | None: ...

    def scan(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def write(
        self,
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        *,
        sync: bool = True,
    ) -> None: ...


class KeyValueStore(Protocol):
    """A set of tables in one store."""

    def table(self, name: bytes) -> TableStore: ...

    def close(self) -> None:
        """Release the store; later calls raise ``StorageUnavailableError``."""
