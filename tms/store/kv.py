"""``KeyValueStore``: the ordered byte store the tables are built on.

Contract:

* keys and values are ``bytes``; keys order as unsigned bytes;
* ``write(ops, sync)`` applies every ``(table, key, value or None to delete)`` atomically,
  across tables: after a crash either every change is there or none; with ``sync=True``
  it is durable when the call returns. ``TableStore.write`` is the one-table shorthand;
* ``scan(start, stop)`` yields ``(key, value)`` with ``start <= key < stop`` (``stop`` None:
  to the end), ascending, or descending with ``reverse=True``; it sees one consistent
  state, unaffected by writes made while it is being consumed;
* ``approximate_size(start, stop)`` is roughly how many bytes a table's key range takes
  in storage (LevelDB: on disk, compressed; writes still in its write buffer are not
  counted yet), for metrics only;
* every method raises ``StorageUnavailableError`` when the medium fails or the store is
  closed.

A store holds several tables; ``table(name)`` is a view whose keys are the table's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

__all__ = ["KeyValueStore", "TableStore", "WriteOp"]

WriteOp = tuple[bytes, bytes, bytes | None]
"""(table name, key, value); a value of None deletes the key."""


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

    def approximate_size(self, start: bytes, stop: bytes | None) -> int: ...


class KeyValueStore(Protocol):
    """A set of tables in one store."""

    def table(self, name: bytes) -> TableStore: ...

    def write(self, ops: Sequence[WriteOp], *, sync: bool = True) -> None:
        """Apply ``ops`` atomically (see the module docstring)."""

    def close(self) -> None:
        """Release the store; later calls raise ``StorageUnavailableError``."""
