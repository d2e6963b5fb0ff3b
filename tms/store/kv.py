"""``KeyValueStore``: the ordered byte store the messaging tables are built on, and what
an engine must guarantee to be one. Engines: ``memory`` (tests), ``leveldb`` (the
embedded default). A new engine is one module here plus one entry in the test suite's
engine list (``tests/tms/store/engines.py``): the contract suite (``tests/tms/store``)
and the service's tests then run on it.

**Data.** Keys and values are ``bytes``; keys order as unsigned bytes. A store holds
several tables; ``table(name)`` is a view whose keys are the table's own.

**Atomic multi-table batches.** ``write(ops, sync)`` applies every ``(table, key, value
or None to delete)`` of ``ops`` atomically, across tables, in order (a later change of a
key wins): after a crash either every change is there or none. With ``sync=True`` it is
durable when the call returns. ``TableStore.write`` is the one-table shorthand.
Concurrent writes may be merged by the engine into one physical write (LevelDB's handle
does), but each keeps its own atomicity and outcome.

**Snapshot-consistent scans.** ``scan(start, stop)`` yields ``(key, value)`` with ``start
<= key < stop`` (``stop`` None: to the end), ascending, or descending with
``reverse=True``. A scan sees one state of the store, taken at the latest when its first
row is read — every write acknowledged before then, nothing of writes made while it is
being consumed — so a reader never sees half of a batch. ``scan_chunks`` yields the same
rows in non-empty lists, for readers that decode many rows per call.

**Failure is fatal for the handle.** Every method raises ``StorageUnavailableError`` when
the medium fails or the store is closed. After a write has failed, the engine must not
acknowledge any later write until it has *recovered* (LevelDB: closed and reopened, its
log replayed): until then every call, reads too, raises ``StorageUnavailableError``. A
write that raised may or may not be there after recovery (its outcome is unknown: the
service answers 503 and a transactional writer invalidates its transaction). Writes are
therefore serialized, or otherwise ordered so that a failure is known before a later
write is acknowledged.

**Epochs.** ``epoch`` changes whenever the store recovered from a failure: anything
derived from earlier reads (a writer's last position, caches) must be read again. A write
given ``epoch`` is applied only if the store has not recovered since (else it raises
``StorageUnavailableError`` and changes nothing): how a read-then-write stays safe.

**One writer per topic.** The tables assume that the rows of a topic generation are
added by one writer at a time — ``tms.writer.TopicWriter``, one per topic generation in a
process — which assigns positions from the newest row it read; cleanup only deletes
expired rows and negates entries in place. The embedded engine gets this for free (one
process holds the database's lock). A shared engine (several service instances on one
database) must make it true by topic ownership, and must *fence* a former owner: see
below.

**Where fencing goes (a shared engine, not built).** An owner that paused past its
lease can wake up and write; ownership alone does not stop it. The check belongs inside
the same atomic write as the rows: ``write`` would take, with the ops, conditions
``(table, key, expected value)`` — the topic's owner row holding the owner's epoch —
checked in the same database transaction as the changes (PostgreSQL: the owner row
read ``FOR UPDATE`` or a conditional ``UPDATE ... WHERE epoch = $1`` whose row count is
checked, before the inserts, then ``COMMIT``), applying nothing and raising a
``StorageUnavailableError`` subclass when one does not hold. The topic writer would add
its topic's condition to every batch it writes (``TableBatch`` is where it collects
what one write carries), and a fenced writer stops and is replaced, resuming ids above
the last stored one (``last_position``), whatever its clock says.

**Sizes.** ``approximate_size(start, stop)`` is roughly how many bytes a table's key range
takes in storage (LevelDB: on disk, compressed; writes still in its write buffer are not
counted yet), for metrics only.
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
