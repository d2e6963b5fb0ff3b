"""``KeyValueStore``: the ordered byte store the messaging tables are built on, and what
an engine must guarantee to be one. Engines: ``memory`` (tests), ``leveldb`` (the
embedded default), ``postgres`` (shared by several service instances). A new engine is
one module here plus one entry in the test suite's engine list
(``tests/tms/store/engines.py``): the contract suite (``tests/tms/store``) and the
service's tests then run on it.

**Data.** Keys and values are ``bytes``; keys order as unsigned bytes. A store holds
several tables; ``table(name)`` is a view whose keys are the table's own.

**Atomic multi-table batches.** ``write(ops, sync)`` applies every ``(table, key, value
or None to delete)`` of ``ops`` atomically, across tables, in order (a later change of a
key wins): after a crash either every change is there or none. With ``sync=True`` it is
durable when the call returns. ``TableStore.write`` is the one-table shorthand.
``updates`` are puts that only *change* rows, applied after ``ops`` in the same atomic
step: each is left out when its key is absent at that moment (after ``ops``). A
read-then-write such as a negation (cleanup's, or a rollback in the owner's batch) must
not bring back a row deleted since it was read.
``new_keys=True`` is a hint that every put of ``ops`` adds a key that is not there
(appended messages): an engine may write such a batch faster, and must still replace a
key that turns out to exist.
Concurrent writes may be merged by the engine into one physical write (LevelDB's handle
does), but each keeps its own atomicity and outcome.

**Snapshot-consistent scans.** ``scan(start, stop)`` yields ``(key, value)`` with ``start
<= key < stop`` (``stop`` None: to the end), ascending, or descending with
``reverse=True``. A scan sees one state of the store, taken at the latest when its first
row is read — every write acknowledged before then, nothing of writes made while it is
being consumed — so a reader never sees half of a batch. ``scan_chunks`` yields the same
rows in non-empty lists, for readers that decode many rows per call.

**Reads that need no other process (optional).** An engine whose reads are answered
from this process's memory and local files, without waiting on a server or on another
process, says so with a ``local_reads`` attribute that is true while that holds (LevelDB:
while its handle is up — a down handle's next call reopens the database, which is slow;
memory: while open). The service then lets a woken long poll read on the event loop's
thread (``MessagingService.local_reads``); an engine without it is read on worker
threads only.

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

**Fences (how a shared engine stays one writer per topic).** An owner that paused past
its lease can wake up and write; ownership alone does not stop it. So a write may carry
a *fence* ``(name, epoch)``: it is applied only while ``epoch`` is the newest epoch taken
of ``name``, checked in the same atomic step as the write (PostgreSQL: the fence row
read ``FOR SHARE`` in the same database transaction), else it raises ``FencedError``
(a ``StorageUnavailableError``) and changes nothing — a *known* outcome, so the store
does not go down for it. ``acquire_fence(name)`` takes a new epoch, one above every
epoch taken of that name before (1 the first time), durably; once it has returned, no
write fenced by an older epoch is applied, and every write such a fence let through
before is visible to reads. A new owner therefore takes its fence *first* and reads its
position (``last_position``) *after*: it resumes above everything the deposed owner
stored, whatever either clock says. Fences are independent of ``epoch`` above (which
is the store's own recovery count). Writes without a fence (topic metadata, cleanup's
deletes and negations, which are idempotent) are never refused by one.

**Sizes.** ``approximate_size(start, stop)`` is roughly how many bytes a table's key range
takes in storage (LevelDB: on disk, compressed; writes still in its write buffer are not
counted yet), for metrics only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

__all__ = ["Fence", "KeyValueStore", "TableStore", "Update", "WriteOp"]

WriteOp = tuple[bytes, bytes, bytes | None]
"""(table name, key, value); a value of None deletes the key."""

Update = tuple[bytes, bytes, bytes]
"""(table name, key, value): a put applied only if the key exists (see ``updates``)."""

Fence = tuple[bytes, int]
"""(fence name, epoch): a write carrying it is applied only while ``epoch`` is the newest
epoch taken of the name (see the module docstring)."""


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

    def write(
        self,
        ops: Sequence[WriteOp],
        *,
        sync: bool = True,
        epoch: int | None = None,
        fence: Fence | None = None,
        updates: Sequence[Update] = (),
        new_keys: bool = False,
    ) -> None:
        """Apply ``ops``, then ``updates`` to the keys that exist at that moment,
        atomically (see the module docstring); with ``fence``, only while it is the
        newest of its name (else ``FencedError``, nothing applied); ``new_keys`` is a
        hint about ``ops`` (see the module docstring)."""

    def acquire_fence(self, name: bytes) -> int:
        """A new epoch of fence ``name``, above every earlier one; durable when it
        returns, and from then on writes fenced by an older epoch are refused."""
        ...

    def close(self) -> None:
        """Release the store; later calls raise ``StorageUnavailableError``."""
