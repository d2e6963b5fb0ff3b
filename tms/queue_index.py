"""``IndexScans``: scans of a queue's index from the writer's *floors* (a part of
``tms.queue_batch.QueueBatch``).

Index scans start at the writer's *floors* (``IndexFloors``): per index kind, a key
below which the store holds no live entry. A queue's index is a moving window — entries
are added at one end and deleted at the other — and an ordered store keeps deleted keys
as tombstones for a while (LevelDB until compaction), so a scan from the start of a kind
would step over every entry deleted since; with the floor it starts at the first live
one. A floor is learnt from a scan that covered everything below it (the first live key
it met, even past the scan's end: the store stepped over the deleted keys up to it
anyway) and lowered by every entry this writer puts below it (the writer is the only one
adding entries): a batch writes its entries after its last scan (``QueueBatch.finish``),
lowering the floors then, before the write.
"""

from __future__ import annotations

from collections.abc import Iterator

from tms.codec import keys
from tms.store.queues import QueueTables

__all__ = ["PURGE_FROM", "IndexFloors", "IndexScans"]

IndexFloors = dict[bytes, bytes]
"""Index kind -> a key below which the store holds no live entry of that kind (see the
module docstring); one per queue writer, lost (and learnt again) when it is replaced.
Under ``PURGE_FROM`` (not an index kind): the message id the next purge of acked
messages goes on from (``QueueBatch``)."""

PURGE_FROM = b""


class IndexScans:
    """The index scans of ``QueueBatch`` (see the module docstring)."""

    _q: QueueTables
    _prefix: bytes
    _floors: IndexFloors

    def _lower_floor(self, kind: bytes, index: bytes) -> None:
        """An entry of ``kind`` this batch writes: no floor above it (after the batch's
        last scan)."""
        floor = self._floors.get(kind)
        if floor is not None and index < floor:
            self._floors[kind] = index

    def _entries(
        self,
        kind: bytes,
        *,
        start: bytes = b"",
        stop: bytes | None = None,
        from_key: bytes | None = None,
    ) -> Iterator[bytes]:
        """Index keys of ``kind`` from the packed fields ``start`` (or the whole key
        ``from_key``) to ``stop`` (see ``QueueTables.entries``), from the floor on,
        learning the floor when the scan covers everything below it (see the module
        docstring)."""
        base = self._prefix + kind
        floor = self._floors.get(kind)
        begin = base + start
        covers = begin <= floor if floor is not None else not start
        if from_key is not None and from_key > begin:
            begin = from_key
            covers = floor is not None and begin <= floor
        if floor is not None and floor > begin:
            begin = floor
        end = keys.stop_key_for_prefix(base)
        bound = base + stop if stop is not None else end
        if bound is not None and begin >= bound:
            return
        found = False
        for key in self._q.index_keys(begin, end):
            if covers and not found:
                self._floors[kind] = key
            found = True
            if bound is not None and key >= bound:
                return
            yield key
        if covers and not found and end is not None:
            self._floors[kind] = end  # nothing live in the store's kind
