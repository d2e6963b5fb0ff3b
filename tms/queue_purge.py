"""``Purges``: purging finished messages, and the bounded scans housekeeping makes (a
part of ``tms.queue_batch.QueueBatch``).

Dead messages are found by their index entry (by when they died). Acked messages have
no index entry: they are found by id, and an id starts with the time its message was
added to the queue, never after it was acked (if the clock stepped back, a message is
purged late, never early). Each purge goes on through the ids older than the retention
from where the last one stopped (the writer's ``PURGE_FROM``, ``tms.queue_index``), at
most ``HOUSEKEEPING_ROWS`` of them, and starts again from the first after the last.
"""

from __future__ import annotations

from itertools import islice

from tms.codec import queue as qc
from tms.codec.queue import QueueRow
from tms.journal import Journal
from tms.queue_access import RowAccess
from tms.queue_index import PURGE_FROM, IndexScans
from tms.queues import QueueConfig, QueueState
from tms.store.tables import TableBatch

__all__ = ["HOUSEKEEPING_ROWS", "Purges"]

HOUSEKEEPING_ROWS = 5_000
"""The most rows one batch's housekeeping looks at per kind (so no batch grows without
limit)."""


class Purges(IndexScans, RowAccess):
    """The purge and housekeeping scans of ``QueueBatch`` (see the module docstring)."""

    _config: QueueConfig
    _batch: TableBatch
    _now: int
    _journal: Journal
    _rows: dict[bytes, QueueRow | None]

    def _stored(self, message_id: bytes) -> QueueRow | None:
        raise NotImplementedError  # QueueBatch's

    def _release_origin(self, row: QueueRow, *, copies: bool) -> bool:
        raise NotImplementedError  # DeadLetters'

    def _purge(self) -> None:
        cutoff_ms = max(0, self._now - self._config.purge_after_s * 1000)
        cutoff = cutoff_ms.to_bytes(8, "big")
        copies = self._q.has_copies(self._prefix)
        for row in self._scan(b"d", stop=cutoff):
            if row.state is QueueState.DEAD and self._release_origin(row, copies=copies):
                self._delete(row)
        self._purge_acked(cutoff_ms, copies)
        # Acked entries of earlier versions: their rows are purged by id, as above.
        for key in list(islice(self._entries(b"a", stop=cutoff), HOUSEKEEPING_ROWS)):
            self._q.delete_index_entry(self._batch, key)

    def _purge_acked(self, cutoff_ms: int, copies: bool) -> None:
        """Acked messages finished before ``cutoff_ms``, by id (see the module docstring)."""
        start = self._floors.get(PURGE_FROM, b"")
        stop = qc.queue_id(cutoff_ms, 0)
        scanned = 0
        for row in self._q.scan_rows(self._prefix, start, stop):
            scanned += 1
            if scanned > HOUSEKEEPING_ROWS:
                self._journal.put(self._floors, PURGE_FROM, row.id)
                return
            if row.id in self._rows or row.state is not QueueState.ACKED:
                continue
            if row.done_ms < cutoff_ms and self._release_origin(row, copies=copies):
                self._delete(row)
        self._journal.put(self._floors, PURGE_FROM, b"")

    def _scan(self, kind: bytes, *, stop: bytes) -> list[QueueRow]:
        """Up to ``HOUSEKEEPING_ROWS`` rows of an index kind below ``stop`` not yet
        changed in this batch."""
        rows = []
        for key in islice(self._entries(kind, stop=stop), HOUSEKEEPING_ROWS):
            message_id = qc.index_entry_id(key)
            if message_id in self._rows:
                continue
            row = self._stored(message_id)
            if row is not None:
                rows.append(row)
        return rows
