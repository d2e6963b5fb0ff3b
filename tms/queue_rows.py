"""``RowCache``: the queue rows a topic writer wrote last, and its counter row, so the
next batches read them from memory rather than the store (``tms.queue_batch``).

A queue's rows are read mostly right after they were written: a receive leases the
messages enqueued just before, an ack finishes the ones just leased. The writer is the
only one changing its topic generation's rows (the storage contract's one writer per
topic), so a row as this writer last wrote it *is* the stored row, as long as:

* it is put here only after the write that holds it succeeded (``update``), and a
  removed row is dropped then;
* everything is dropped when a write fails (``clear``): a write whose sync failed may
  still land or not, so only the store knows;
* the cache lives and dies with its writer: a writer whose store recovered from a
  failure, or that lost its fence to another instance, is replaced (``TopicWriter``),
  and a stale writer's batches are refused whole, so no answer is built on its cache.

Bounded by rows and payload bytes (oldest written first out: ~2 MiB at most per queue
writer, and a writer's batches use a few hundred rows), so a queue of a million
messages still costs disk, not memory; large payloads are not kept at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from tms.codec.queue import QueueRow
from tms.queues import QueueState, Receipt

__all__ = ["RowCache"]

MAX_ROWS = 4096
MAX_BYTES = 1 << 20
MAX_PAYLOAD = 4096


class RowCache:
    """See the module docstring. Used by one writer's batches, one at a time."""

    __slots__ = ("_bytes", "_rows", "counts")

    def __init__(self) -> None:
        self._rows: dict[bytes, QueueRow] = {}
        self._bytes = 0
        self.counts: tuple[int, ...] | None = None
        """The queue's counter row as last written or read (None: ask the store)."""

    def get(self, message_id: bytes) -> QueueRow | None:
        """The row as last written, or None if not kept (ask the store)."""
        return self._rows.get(message_id)

    def lease_of(self, receipt: Receipt) -> QueueRow | None:
        """The row, if kept and if it is the lease of this delivery; else None (ask the
        store). An ack or nack of the current lease changes the row, so its answer is
        written, which a writer that is no longer the topic's cannot do; any other
        answer may change nothing and write nothing, so it is the store's."""
        row = self._rows.get(receipt.id)
        if (
            row is not None
            and row.state is QueueState.LEASED
            and row.attempts == receipt.attempt
            and not row.tx_write_pointer
        ):
            return row
        return None

    def __len__(self) -> int:
        return len(self._rows)

    def update(self, written: Mapping[bytes, QueueRow | None]) -> None:
        """The rows of a batch just written (None: removed)."""
        rows = self._rows
        for message_id, row in written.items():
            old = rows.pop(message_id, None)
            if old is not None:
                self._bytes -= len(old.payload)
            if row is not None and len(row.payload) <= MAX_PAYLOAD:
                rows[message_id] = row
                self._bytes += len(row.payload)
        while len(rows) > MAX_ROWS or self._bytes > MAX_BYTES:
            oldest = next(iter(rows))
            self._bytes -= len(rows.pop(oldest).payload)

    def clear(self) -> None:
        """Forget everything (a write failed)."""
        self._rows.clear()
        self._bytes = 0
        self.counts = None
