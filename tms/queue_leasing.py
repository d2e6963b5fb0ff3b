"""``Leasing``: how a writer batch leases messages in memory (a part of
``tms.queue_batch.QueueBatch``; the leases themselves: ``tms.queue_leases``).

A receive puts each lease in ``_lease_changes`` (the batch's, journalled, handed to the
writer's ``LeaseTable`` once written) and one lease record into the write; the rows stay
as stored. Until the lease ends, the batch sees the message through ``_leased_view``:
LEASED by that attempt until the deadline, so acks, nacks, transactional acks and
expiry go through the same transitions as a stored lease, and the row write that ends
a lease replaces the stored ready entry (``_before``). The common ack — outside a
transaction, of the current lease, on a message the batch has not changed — goes
straight from the stored row to the acked one (``_ack_lease``): the same transition,
without the leased view built only to be replaced (acks are a third of a queue's work).
"""

from __future__ import annotations

from tms.codec import queue as qc
from tms.codec.queue import QueueRow
from tms.journal import Journal
from tms.queue_access import RowAccess
from tms.queue_fresh import FreshReady
from tms.queue_leases import Lease, LeaseRecord, LeaseTable
from tms.queue_purge import HOUSEKEEPING_ROWS
from tms.queues import QueueMessage, QueueState, Receipt
from tms.store.queues import QueueTables
from tms.store.tables import TableBatch

__all__ = ["Leasing"]


class Leasing(RowAccess):
    """The in-memory leases of ``QueueBatch`` (see the module docstring)."""

    _q: QueueTables
    _prefix: bytes
    _batch: TableBatch
    _now: int
    _journal: Journal
    _leases: LeaseTable
    _lease_changes: dict[bytes, Lease | None]
    _records_added: dict[bytes, LeaseRecord]
    _records_removed: dict[bytes, bool]
    _before: dict[bytes, bytes | None]
    _rows: dict[bytes, QueueRow | None]
    _cursors: dict[bytes, bytes]
    _fresh: FreshReady
    changed: int

    def _failed(self, row: QueueRow, delay_ms: int | None) -> QueueRow:
        raise NotImplementedError  # QueueBatch's

    def _counters(self) -> list[int]:
        raise NotImplementedError  # QueueBatch's

    def _stored(self, message_id: bytes) -> QueueRow | None:
        raise NotImplementedError  # QueueBatch's

    def _lease(self, message_id: bytes) -> Lease | None:
        """The message's lease held in memory (None: none)."""
        changes = self._lease_changes
        if message_id in changes:
            return changes[message_id]
        return self._leases.get(message_id)

    def _leased_view(self, row: QueueRow, lease: Lease) -> QueueRow:
        """``row`` (stored ready, or ready in this batch) as leased by ``lease``."""
        if row.id not in self._before:  # stored: its ready entry is what finish replaces
            self._before[row.id] = qc.index_key(self._prefix, row) or b""
        return QueueRow(
            row.id, QueueState.LEASED, row.priority, lease[0], row.enqueued_ms, row.due_ms,
            lease[1], row.done_ms, 0, row.key, row.payload,
        )  # fmt: skip

    def _begin_leases(self, rows: list[QueueRow], deadline: int) -> list[QueueMessage]:
        """Lease ``rows`` (ready) until ``deadline``: in memory, and one lease record
        written with the counts, synced before the receiver is answered."""
        leased: list[QueueMessage] = []
        entries: list[tuple[bytes, int]] = []
        put = self._journal.put
        changes = self._lease_changes
        for row in rows:
            attempt = row.attempts + 1
            put(changes, row.id, (attempt, deadline))
            self._fresh.drop(row.id)
            entries.append((row.id, attempt))
            leased.append(
                QueueMessage(
                    row.id, row.payload, attempt, row.enqueued_ms, row.due_ms, row.priority,
                    deadline, row.key,
                )
            )  # fmt: skip
        if entries:
            counts = self._counters()
            counts[QueueState.READY] -= len(entries)
            counts[QueueState.LEASED] += len(entries)
            self.changed += len(entries)
            key = qc.lease_record_key(self._prefix, deadline, *entries[0])
            put(self._records_added, key, (deadline, entries))
            self._q.put_lease_record(self._batch, key, qc.encode_lease_entries(entries))
        return leased

    def _expire_leases(self) -> None:
        """The leases held in memory that ran out: back-off or dead (``_failed``), and
        their records deleted; at most ``HOUSEKEEPING_ROWS`` leases a batch."""
        expired = 0
        for key, (deadline, entries) in self._leases.due(self._now):
            if expired >= HOUSEKEEPING_ROWS:
                return
            for message_id, attempt in entries:
                if self._lease(message_id) == (attempt, deadline):
                    row = self._get(message_id)
                    if row is not None:
                        self._put(row, self._failed(row, None))
                        expired += 1
            self._journal.put(self._records_removed, key, True)
            self._q.delete_lease_record(self._batch, key)

    def _ack_lease(self, receipt: Receipt) -> bool:
        """The common ack, outside a transaction, of the current lease held in memory on
        a message not yet changed in this batch: what ``ack`` does for it, without the
        leased view (``_leased_view``) built only to be replaced. False (nothing done)
        for any other receipt, which ``ack`` then takes the general way."""
        message_id = receipt.id
        lease = self._lease(message_id)
        if lease is None or lease[0] != receipt.attempt or message_id in self._rows:
            return False
        row = self._stored(message_id)  # stored ready: its lease is held here
        if row is None:
            return False
        if message_id not in self._before:  # its ready entry is what finish replaces
            self._before[message_id] = qc.index_key(self._prefix, row) or b""
        counts = self._counters()
        counts[QueueState.LEASED] -= 1
        counts[QueueState.ACKED] += 1
        self.changed += 1
        put = self._journal.put
        put(self._lease_changes, message_id, None)  # its row is written: the lease ends
        put(
            self._rows,
            message_id,
            QueueRow(
                message_id, QueueState.ACKED, row.priority, lease[0], row.enqueued_ms,
                row.due_ms, lease[1], self._now, 0, row.key, row.payload,
            ),
        )  # fmt: skip
        self._fresh.drop(message_id)
        return True

    def _lower_skip(self, least_ready: bytes | None) -> None:
        """At the end of the batch: where the next batches' receives start goes below
        every ready entry put (``least_ready``, the least) and every message whose lease
        ended with it ready again (its entry may be the one it had)."""
        lows = [least_ready] if least_ready is not None else []
        for message_id, lease in self._lease_changes.items():
            row = self._rows.get(message_id) if lease is None else None
            if row is not None and row.state is QueueState.READY:
                lows.append(qc.index_key(self._prefix, row) or b"")
        skip = self._cursors.get(b"R", self._leases.skip_from)
        if lows and skip is not None and min(lows) < skip:
            self._cursors[b"R"] = min(lows)
