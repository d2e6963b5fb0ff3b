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
  closed. A failed write may leave the store *down* (every call raising) until it has
  recovered on its own; a write that raised may or may not be there after recovery;
* ``epoch`` changes whenever the store recovered from a failure: anything derived from
  earlier reads (a writer's last position, caches) must be read again. A write given
  ``epoch`` is applied only if the store has not recovered since (else it raises
  ``StorageUnavailableError`` and changes nothing): how a read-then-write stays safe.

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

    @property
    def epoch(self) -> int:
        """The store's ``epoch``."""
        ...

    def get(self, key: bytes) -> bytes | None: ...

    def scan(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def scan_chunks(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[list[tuple[bytes, bytes]]]:
        """The rows of ``scan``, in non-empty lists: for readers that decode a chunk of
        rows in one call."""
        ...

    def write(
        self,
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        *,
        sync: bool = True,
        epoch: int | None = None,
    ) -> None: ...

    def approximate_size(self, start: bytes, stop: bytes | None) -> int: ...


class KeyValueStore(Protocol):
    """A set of tables in one store."""

    @property
    def epoch(self) -> int:
        """How many times the store recovered from a failure (see the module docstring)."""
        ...

    def table(self, name: bytes) -> TableStore: ...

    def write(self, ops: Sequence[WriteOp], *, sync: bool = True, epoch: int | None = None) -> None:
        """Apply ``ops`` atomically (see the module docstring)."""

    def close(self) -> None:
        """Release the store; later calls raise ``StorageUnavailableError``."""
