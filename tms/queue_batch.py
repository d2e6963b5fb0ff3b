"""``QueueBatch``: the queue operations of one topic writer batch (``tms.writer``).

The topic writer is the only one changing a queue's rows (the storage contract's one
writer per topic), so every transition of ``tms.queues`` happens here, in the writer's
batch, and is written in its one synced, atomic write before anyone is answered: a
lease's record is durable before the message is handed out (no crash can make it
deliverable again while a receiver holds it), an ack before it is confirmed. Leases are
held in memory (``tms.queue_leasing``, ``tms.queue_leases``): a receive writes one lease
record, not its messages' rows, which stay ready until the lease ends.

Within a batch, rows already changed are kept in ``_rows`` (the store does not show them
until the write): every operation reads a message through ``_get``, so later operations
of the batch see earlier ones. Index scans read the store, skip entries whose message
changed in this batch, and add the messages that became ready in it. Nothing of a
message is added to the write until the batch's operations are done (``finish``): then
each message changed is written once, in its final state, over the index entry it had
in the store (``_before``), so a message enqueued and leased (or leased and acked) by one
batch costs one row write and its final index entry. Acked messages have no index entry;
purge finds them by id (``_purge_acked``).

Each operation checks everything first and only then changes anything, but a read of
the store (or the transaction manager) can still fail part way through one: the writer
brackets each with ``save`` and, if it fails, ``restore`` (every change of this state
since ``save`` undone, through the batch's ``Journal``) and drops what it added to the
write (its key rows), so the batch goes on from what it writes.

Index scans start at the writer's *floors* (``tms.queue_index``), and the receives of one
batch go on from where the last one stopped, reading the ready entries from the writer's
ready window where it covers them (``tms.queue_ready``).

Housekeeping rides on the operations that need it, bounded per batch so no batch grows
without limit (``HOUSEKEEPING_ROWS``): a receive first expires leases that ran out
(back-off, or dead after ``max_attempts``), settles pending transactional work with the
guard's ``outcomes``, and promotes scheduled messages that are due; ``Maintain`` does the
same and purges finished messages past ``purge_after_s``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from itertools import islice

from tms.codec import queue as qc
from tms.codec.queue import QueueRow
from tms.errors import TransactionNotInProgressError
from tms.guard import WritePointerGuard
from tms.journal import Journal
from tms.queue_dead import DeadLetters
from tms.queue_fresh import FreshReady
from tms.queue_index import IndexFloors
from tms.queue_leases import Lease, LeaseRecord, LeaseTable
from tms.queue_leasing import Leasing
from tms.queue_purge import Purges
from tms.queue_ready import ReadyReads, ReadyWindow
from tms.queue_rows import RowCache
from tms.queue_settle import Settling
from tms.queues import (
    AckOutcome,
    AckRequest,
    Enqueued,
    EnqueueRequest,
    NackRequest,
    QueueConfig,
    QueueState,
    Receipt,
    ReceiveRequest,
    ReceiveResult,
    backoff_ms,
)
from tms.store.queues import QueueTables
from tms.store.tables import TableBatch

__all__ = ["IndexFloors", "QueueBatch", "Saved"]

_FOREVER = 2**62
_COUNTED_AS = tuple(state.counted_as for state in QueueState)  # by state (a hot path)


@dataclasses.dataclass(frozen=True, slots=True)
class Saved:
    """A ``QueueBatch``'s counts and flags before an operation (``QueueBatch.save``)."""

    counts: tuple[int, ...] | None
    became_ready: bool
    changed: int
    dead_lettered: int
    housekept: bool


class QueueBatch(Leasing, Settling, DeadLetters, Purges, ReadyReads):
    """See the module docstring. Not thread-safe (the writer's batch leader uses it)."""

    def __init__(
        self,
        queues: QueueTables,
        prefix: bytes,
        config: QueueConfig,
        batch: TableBatch,
        now_ms: int,
        *,
        next_id: Callable[[], bytes],
        guard: WritePointerGuard,
        rng: random.Random,
        floors: IndexFloors | None = None,
        cache: RowCache | None = None,
        leases: LeaseTable | None = None,
        ready: ReadyWindow | None = None,
    ) -> None:
        self._q = queues
        self._prefix = prefix
        self._config = config
        self._batch = batch
        self._now = now_ms
        self._next_id = next_id
        self._guard = guard
        self._rng = rng
        self._floors: IndexFloors = floors if floors is not None else {}
        self._cache = cache if cache is not None else RowCache()
        self._leases = leases if leases is not None else LeaseTable()
        self._ready = ready if ready is not None else ReadyWindow()
        self._ready_scans = []  # facts about the store, as _before: not journalled
        if not self._leases.loaded:
            self._leases.load(queues, prefix)
        # Leases begun (None: ended) and lease records added and removed in this batch
        # (tms.queue_leases); the table takes them once the batch is written.
        self._lease_changes: dict[bytes, Lease | None] = {}
        self._records_added: dict[bytes, LeaseRecord] = {}
        self._records_removed: dict[bytes, bool] = {}
        self._rows: dict[bytes, QueueRow | None] = {}  # changed in this batch (None: deleted)
        # Of each message in _rows, its index entry in the store (b"": stored without
        # one; None: not stored): what finish() writes its final state over. A fact
        # about the store, which does not change during the batch: not journalled (an
        # entry left by a failed operation is still true, and finish only reads those
        # of the messages in _rows).
        self._before: dict[bytes, bytes | None] = {}
        self._keys: dict[str, bytes | None] = {}
        self._origins: set[bytes] = set()
        self._journal = Journal()  # the changes since save()
        self._fresh = FreshReady(self._journal)  # became ready in this batch
        self._cursors: dict[bytes, bytes] = {}  # index kind -> where its next scan starts
        self._counts: list[int] | None = None
        self.became_ready = False
        self.changed = 0
        """Messages changed (or removed) so far."""
        self.dead_lettered = 0
        """Messages that became MOVING (to be moved to the dead-letter queue)."""
        self._housekept = False

    # -- one operation at a time --------------------------------------------------------

    def save(self) -> Saved:
        """Before an operation: what ``restore`` goes back to if it fails."""
        self._journal.clear()
        counts = tuple(self._counts) if self._counts is not None else None
        return Saved(counts, self.became_ready, self.changed, self.dead_lettered, self._housekept)

    def restore(self, saved: Saved) -> None:
        """Undo every change since ``save`` (the operation failed; its rows are dropped
        by the writer). The writer's index floors are left as they are: a floor only goes
        down for an entry put (still below every live one) or to a key the store holds."""
        self._journal.undo()
        self._fresh.reset()
        self._counts = list(saved.counts) if saved.counts is not None else None
        self.became_ready = saved.became_ready
        self.changed = saved.changed
        self.dead_lettered = saved.dead_lettered
        self._housekept = saved.housekept

    # -- rows ---------------------------------------------------------------------------

    def _get(self, message_id: bytes) -> QueueRow | None:
        """The message as this batch sees it: leased in memory (``_lease``) shows as
        LEASED by that attempt until the deadline."""
        row = self._rows[message_id] if message_id in self._rows else self._stored(message_id)
        lease = self._lease(message_id)
        if lease is not None and row is not None:
            return self._leased_view(row, lease)
        return row

    def _stored(self, message_id: bytes) -> QueueRow | None:
        """The row as stored (the writer's cache, or the store)."""
        row = self._cache.get(message_id)
        return row if row is not None else self._q.get(self._prefix, message_id)

    def _for_receipt(self, receipt: Receipt) -> QueueRow | None:
        """The row an ack or nack of ``receipt`` goes by (``RowCache.lease_of``)."""
        lease = self._lease(receipt.id)
        if lease is not None and receipt.attempt <= lease[0]:
            return self._get(receipt.id)  # this delivery, or an earlier one: lease lost
        # (a later delivery than this writer made: another instance's, the store's word)
        if receipt.id in self._rows:
            return self._rows[receipt.id]
        row = self._cache.lease_of(receipt)
        return row if row is not None else self._q.get(self._prefix, receipt.id)

    def written(self) -> None:
        """The batch was written: its rows are the stored ones now (``RowCache``)."""
        self._cache.update(self._rows)
        self._ready_written()
        if self._counts is not None:
            self._cache.counts = tuple(self._counts)
        self._leases.update(
            self._lease_changes,
            self._records_added,
            self._records_removed.keys(),
            self._cursors.get(b"R", self._leases.skip_from),
        )

    def _counters(self) -> list[int]:
        if self._counts is None:
            cached = self._cache.counts
            stored = cached if cached is not None else self._q.counters(self._prefix)
            self._counts = list(stored)
        return self._counts

    def _put(self, old: QueueRow | None, new: QueueRow) -> None:
        counts = self._counters()
        if old is not None:
            counts[_COUNTED_AS[old.state]] -= 1
        counts[_COUNTED_AS[new.state]] += 1
        self.changed += 1
        message_id = new.id
        if self._lease(message_id) is not None:  # its row is written: the lease ends
            self._journal.put(self._lease_changes, message_id, None)
        if message_id not in self._before:  # its first change in the batch: as stored
            before = (qc.index_key(self._prefix, old) or b"") if old is not None else None
            self._before[message_id] = before
        self._journal.put(self._rows, message_id, new)
        if new.state is QueueState.READY:
            self._fresh.put(new)
            self.became_ready = True
        else:
            self._fresh.drop(message_id)

    def _delete(self, row: QueueRow) -> None:
        self._counters()[_COUNTED_AS[row.state]] -= 1
        self.changed += 1
        if self._lease(row.id) is not None:
            self._journal.put(self._lease_changes, row.id, None)
        if row.id not in self._before:
            self._before[row.id] = qc.index_key(self._prefix, row) or b""
        # A dead letter may carry a key another message of this queue holds: only the
        # key's own message takes it along.
        if row.key is not None and self._id_of_key(row.key) == row.id:
            self._q.delete_key(self._batch, self._prefix, row.key)
            self._journal.put(self._keys, row.key, None)
        self._journal.put(self._rows, row.id, None)
        self._fresh.drop(row.id)

    def _id_of_key(self, key: str) -> bytes | None:
        if key in self._keys:
            return self._keys[key]
        return self._q.id_of_key(self._prefix, key)

    def finish(self) -> None:
        """After the batch's operations: each message changed is written once, in its
        final state (one row write, and index entries only where the final one differs
        from the stored one), then the counter row."""
        least = self._q.write_rows(self._batch, self._prefix, self._rows, self._before)
        for kind, index in least.items():
            self._lower_floor(kind, index)
        self._lower_skip(least.get(b"r"))
        if self._counts is not None and self.changed:
            self._q.put_counters(self._batch, self._prefix, tuple(self._counts))

    def _waiting(self, row: QueueRow, due_ms: int) -> QueueRow:
        """``row`` waiting for ``due_ms``: scheduled, or ready if that has come."""
        state = QueueState.READY if due_ms <= self._now else QueueState.SCHEDULED
        return QueueRow(
            row.id, state, row.priority, row.attempts, row.enqueued_ms, due_ms, 0, row.done_ms,
            0, row.key, row.payload,
        )  # fmt: skip

    def _failed(self, row: QueueRow, delay_ms: int | None) -> QueueRow:
        """``row`` after a failed delivery: back to the queue after ``delay_ms`` (None:
        the back-off from when it failed), or dead after its last attempt."""
        max_attempts = self._config.max_attempts
        if max_attempts and row.attempts >= max_attempts:
            dlq = self._config.dead_letter_queue
            moving = dlq is not None
            self.dead_lettered += moving
            if dlq is not None:  # where it goes, whatever the property says later
                self._q.put_destination(self._batch, self._prefix, row.id, dlq)
            return dataclasses.replace(
                row,
                state=QueueState.MOVING if moving else QueueState.DEAD,
                done_ms=self._now, lease_ms=0, tx_write_pointer=0,
            )  # fmt: skip
        if delay_ms is None:
            failed_at = min(row.lease_ms, self._now) if row.lease_ms else self._now
            due = failed_at + backoff_ms(self._config, row.attempts, self._rng)
        else:
            due = self._now + delay_ms
        return self._waiting(row, due)

    # -- operations ---------------------------------------------------------------------

    def enqueue(self, request: EnqueueRequest) -> tuple[Enqueued, ...]:
        wp = request.tx_write_pointer or 0
        existing: list[bytes | None] = []
        for item in request.items:
            found = None
            if item.key is not None:
                found = self._id_of_key(item.key)
            if found is not None:
                row = self._get(found)
                pending = row is not None and row.state is QueueState.PENDING
                if pending and row is not None and row.tx_write_pointer != wp:
                    raise TransactionNotInProgressError(
                        f"key {item.key!r} was enqueued by transaction {row.tx_write_pointer}, "
                        "which has not settled yet"
                    )
            existing.append(found)
        results = []
        for item, found in zip(request.items, existing, strict=True):
            if found is not None:
                results.append(Enqueued(found, duplicate=True))
                continue
            message_id = self._next_id()
            due = item.due_ms(self._now)
            if wp:
                state = QueueState.PENDING
            else:
                state = QueueState.READY if due <= self._now else QueueState.SCHEDULED
            row = QueueRow(
                message_id, state, item.priority, 0, self._now, due,
                tx_write_pointer=wp, key=item.key, payload=item.payload,
            )  # fmt: skip
            self._put(None, row)
            if item.key is not None:
                self._journal.put(self._keys, item.key, message_id)
                self._q.put_key(self._batch, self._prefix, item.key, message_id)
            results.append(Enqueued(message_id))
        return tuple(results)

    def receive(self, request: ReceiveRequest) -> ReceiveResult:
        self.housekeeping()
        lease_ms = request.lease_ms if request.lease_ms is not None else self._config.lease_s * 1000
        deadline = self._now + lease_ms
        limit = request.max_messages
        # The store's ready entries from where the batch's last receive stopped (or,
        # first, from where the writer's leases end: tms.queue_leases): the store does
        # not change during the batch, and every entry before the cursor is of a message
        # leased or changed already, so N receives of one batch read each entry once.
        cursor = self._cursors.get(b"r", self._cursors.get(b"R", self._leases.skip_from))
        stored: list[tuple[bytes, QueueRow]] = []
        last: bytes | None = None
        for key in self._ready_from(cursor):
            last = key
            message_id = qc.index_entry_id(key)
            if message_id in self._rows or self._lease(message_id) is not None:
                continue  # changed in this batch, or leased: not ready
            row = self._stored(message_id)
            if row is not None and row.state is QueueState.READY:
                stored.append((key, row))
                if len(stored) >= limit:
                    break
        fresh = self._fresh.take(limit)
        candidates = [row for _key, row in stored] + fresh
        candidates.sort(key=lambda r: (r.priority, r.due_ms, r.id))
        leased = self._begin_leases(candidates[:limit], deadline)
        # The next receive starts at the first stored candidate not leased (in index
        # order, as they were sorted), or after everything this one looked at.
        left = next((key for key, row in stored if self._lease(row.id) is None), None)
        if left is None and last is not None:
            left = last + b"\x00"
        if left is not None:
            self._journal.put(self._cursors, b"r", left)
            self._journal.put(self._cursors, b"R", left)  # for the next batches
        self._fresh.give_back(fresh)
        # Only a receiver that got nothing waits, and needs to know for how long.
        return ReceiveResult(tuple(leased), None if leased else self._next_due())

    def _next_due(self) -> int | None:
        """The earliest scheduled due time or lease expiry known to this batch."""
        times = [
            qc.index_entry_time(key)
            for kind in (b"s", b"l")
            for key in islice(self._entries(kind), 1)
            if qc.index_entry_id(key) not in self._rows
        ]
        earliest = self._leases.earliest()
        if earliest is not None:
            times.append(earliest)
        times.extend(record[0] for record in self._records_added.values())
        for row in self._rows.values():
            if row is not None and row.state is QueueState.SCHEDULED:
                times.append(row.due_ms)
            elif row is not None and row.state is QueueState.LEASED and not row.tx_write_pointer:
                times.append(row.lease_ms)
        return min(times) if times else None

    def ack(self, request: AckRequest) -> tuple[AckOutcome, ...]:
        wp = request.tx_write_pointer or 0
        outcomes = []
        for receipt in request.receipts:
            if not wp and self._ack_lease(receipt):
                outcomes.append(AckOutcome.ACKED)
                continue
            row = self._for_receipt(receipt)
            outcome = _ack_outcome(row, receipt.attempt, wp)
            changes = (
                outcome in (AckOutcome.ACKED, AckOutcome.PENDING)
                and row is not None
                and row.state is not QueueState.ACKED
                and not (row.state is QueueState.LEASED and row.tx_write_pointer == wp != 0)
            )
            if changes and row is not None:
                if wp:
                    lease = row.lease_ms if row.state is QueueState.LEASED else self._now
                    new = dataclasses.replace(
                        row, state=QueueState.LEASED, lease_ms=lease, tx_write_pointer=wp
                    )
                else:
                    new = QueueRow(
                        row.id, QueueState.ACKED, row.priority, row.attempts, row.enqueued_ms,
                        row.due_ms, row.lease_ms, self._now, 0, row.key, row.payload,
                    )  # fmt: skip
                self._put(row, new)
            outcomes.append(outcome)
        return tuple(outcomes)

    def nack(self, request: NackRequest) -> tuple[AckOutcome, ...]:
        outcomes = []
        for receipt in request.receipts:
            row = self._for_receipt(receipt)
            if row is None or row.state is QueueState.PENDING:
                outcomes.append(AckOutcome.UNKNOWN)
            elif row.state is QueueState.ACKED:
                outcomes.append(AckOutcome.ACKED)
            elif (
                row.state is not QueueState.LEASED
                or row.attempts != receipt.attempt
                or row.tx_write_pointer
            ):
                outcomes.append(AckOutcome.LEASE_LOST)
            else:
                new = self._failed(dataclasses.replace(row, lease_ms=0), request.delay_ms)
                self._put(row, new)
                dead = new.state in (QueueState.DEAD, QueueState.MOVING)
                outcomes.append(AckOutcome.DEAD if dead else AckOutcome.RETURNED)
        return tuple(outcomes)

    def maintain(self, purge: bool) -> int:
        """Housekeeping now (see the module docstring), purging if asked; how many
        messages it changed."""
        before = self.changed
        self.housekeeping()
        if purge:
            self._purge()
        return self.changed - before

    def housekeeping(self) -> None:
        """Expire leases, settle pending transactions, promote due messages: once per
        batch, at most ``HOUSEKEEPING_ROWS`` each."""
        if self._housekept:
            return
        self._housekept = True
        now_stop = (self._now + 1).to_bytes(8, "big")
        self._expire_leases()
        for row in self._scan(b"l", stop=now_stop):
            if row.state is QueueState.LEASED and not row.tx_write_pointer:
                self._put(row, self._failed(row, None))
        counts = self._counters()
        if counts[QueueState.PENDING] or counts[QueueState.LEASED]:
            self._settle_known()
        for row in self._scan(b"s", stop=now_stop):
            if row.state is QueueState.SCHEDULED:
                self._put(row, self._waiting(row, row.due_ms))

    def stats_due(self) -> int:
        """The earliest due time of a ready message (for stats)."""
        due = self._q.first_ready_due(self._prefix, self._leases)
        return due if due is not None else _FOREVER


def _ack_outcome(row: QueueRow | None, attempt: int, wp: int) -> AckOutcome:
    """What acking ``row``'s delivery ``attempt`` (under ``wp``, 0: none) does."""
    if row is None or row.state is QueueState.PENDING:
        return AckOutcome.UNKNOWN
    if row.state is QueueState.ACKED:
        return AckOutcome.ACKED
    if row.attempts != attempt or row.state is QueueState.MOVING:  # MOVING: the DLQ's now
        return AckOutcome.LEASE_LOST
    if row.state is QueueState.LEASED and row.tx_write_pointer:
        # Another transaction's ack is pending: only the same transaction again.
        return AckOutcome.PENDING if row.tx_write_pointer == wp else AckOutcome.LEASE_LOST
    # Leased by this attempt, or its lease ran out and nobody else has it yet (the work
    # was done: the ack is taken, as Vitess takes acks by id).
    return AckOutcome.PENDING if wp else AckOutcome.ACKED
