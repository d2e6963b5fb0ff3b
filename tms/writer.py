"""``TopicWriter``: the single writer of one topic generation, with group commit.

Every write operation of a topic (``tms.operations``) goes through its writer's
``GroupCommit`` (``tms.commit``), from threads and event loops alike. One batch at a
time, its leader takes *everything* queued and:

1. admits each operation: its ticket's deadline (one still queued past it is dropped,
   ``RequestTimeoutError``), ``check`` (invalid on its own), the transaction's lifetime
   (transactional writes of a transaction older than ``max_lifetime_ms`` are refused:
   its id may already have been truncated from the invalid list), and the write-pointer
   guard (``tms.guard``), asked once for the whole batch;
2. applies the admitted ones through the one dispatch (``_Batch``, a
   ``WriteDispatch``), which assigns positions and adds their rows to one
   ``TableBatch``;
3. writes that batch in **one synced, atomic write**, and only then are the callers
   answered.

So:

* ids ``(publish_ms, seq)`` are assigned and made durable in one order, and a reply goes
  out only after its rows are durable: a consumer that has read up to id X never later
  finds a new entry below X;
* ``publish_ms = max(now, last)``: it never goes back when the clock does, and on open
  the writer resumes after the newest row in the table; when ``seq`` passes 0xFFFF the
  writer moves to the next millisecond (which may run ahead of the clock);
* each request's entries are contiguous; an empty transactional request becomes one
  reference entry (the commit marker);
* a commit marker *seals* its write pointer in the payload table: later stores under it
  are refused (consumers that already expanded the marker would never see them), and
  publishing the marker again returns the first marker's range instead of a duplicate
  (unless that one was rolled back); ``markers`` writes several markers as one operation,
  at most once per idempotency key;
* a subscription's transactional position (``tms.positions``: ``WritePosition`` writes
  one, deleting the rows it supersedes; ``RollbackPosition`` deletes one) is written in
  the batch like a message, under the topic generation's prefix;
* an operation that is invalid on its own fails alone (adding nothing to the batch); a
  storage failure fails the whole batch and nothing of it is written.

The writer assumes it is the only one adding rows to its topic generation (the storage
contract's one-writer-per-topic assumption, ``tms.store.kv``). With several instances
on one store it is made with its instance's ``fence`` of the topic (taken before the
writer reads its last position), every batch carries it, and a batch the store refuses
(``FencedError``: another instance owns the topic now) fails whole and makes the writer
``stale`` for good (``on_fenced`` is told).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from tms.codec import keys
from tms.codec.queue import queue_id
from tms.commit import GroupCommit
from tms.errors import (
    FencedError,
    RequestTimeoutError,
    StorageUnavailableError,
    TmsError,
    TmsInvalidArgumentError,
    TransactionTooOldError,
    write_interrupted,
)
from tms.guard import Use, WritePointerGuard
from tms.model import MarkersResult, RollbackDetail, StoreRequest, TopicMetadata
from tms.operations import (
    Ack,
    DeadLetterDone,
    DeadLetterIn,
    Enqueue,
    Maintain,
    Markers,
    Nack,
    Publish,
    Receive,
    Rollback,
    RollbackPosition,
    Settle,
    Store,
    Ticket,
    WritePosition,
)
from tms.queue_batch import IndexFloors, QueueBatch
from tms.queue_leases import LeaseTable
from tms.queue_ready import ReadyWindow
from tms.queue_rows import RowCache
from tms.queues import AckOutcome, Enqueued, QueueConfig, ReceiveResult, check_queue
from tms.store.kv import Fence
from tms.store.tables import PayloadRow, TableBatch, Tables
from txms_common.clock import Clock
from txn.transaction import MAX_TX_PER_MS

__all__ = ["BatchStats", "TopicWriter"]

_MAX_SEQ = 0xFFFF
_PAYLOAD_POSITION_CACHE = 10_000


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one group-committed batch did (for metrics and notifications)."""

    operations: int
    messages: int
    payload_bytes: int
    rolled_back: int
    queue_length: int
    seconds: float
    published: bool = False
    dead_lettered: int = 0
    """Queue messages that became MOVING: to move to the dead-letter queue."""


class TopicWriter:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        tables: Tables,
        metadata: TopicMetadata,
        clock: Clock,
        guard: WritePointerGuard,
        *,
        max_lifetime_ms: int,
        executor: Executor | None = None,
        on_batch: Callable[[TopicMetadata, BatchStats], None] | None = None,
        monotonic: Callable[[], float] = time.perf_counter,
        epoch: int | None = None,
        rng: random.Random | None = None,
        fence: Fence | None = None,
        on_fenced: Callable[[TopicWriter], None] | None = None,
    ) -> None:
        """``executor`` leads batches for event-loop callers (``submit_async``); ``rng``
        draws the jitter of queue back-offs."""
        self.fence = fence
        self._on_fenced = on_fenced
        self.fenced = False
        self.metadata = metadata
        self._tables = tables
        self._clock = clock
        self._guard = guard
        self._max_lifetime_ms = max_lifetime_ms
        self._on_batch = on_batch
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self.prefix = keys.topic_prefix(metadata.topic, metadata.generation)
        self._commit: GroupCommit[Ticket[object]] = GroupCommit(
            self._write_batch, executor=executor, failed=write_interrupted
        )
        self._closed = False
        self._close_lock = threading.Lock()
        # Everything this writer knows (the metadata, the positions below) is from this
        # epoch of the store; its writes are refused once the store recovered from a
        # failure (a failed write may have landed after all), and it is replaced.
        self.epoch = tables.epoch if epoch is None else epoch
        # Continue after every earlier generation too: a rollback token of a deleted
        # generation must never cover positions of the new one.
        if QueueConfig.of(metadata.properties) is not None:
            last = tables.queues.last_position(self.prefix)
        else:
            last = tables.messages.last_position(self.prefix, earlier_generations=True)
        self._ms, self._next_seq = (last[0], last[1] + 1) if last is not None else (0, 0)
        self._payload_positions: dict[int, tuple[int, int]] = {}
        self.queue_floors: IndexFloors = {}  # a queue's index floors (tms.queue_batch)
        self.queue_rows = RowCache()  # the queue rows it wrote last (tms.queue_rows)
        self.queue_leases = LeaseTable()  # a queue's leases (tms.queue_leases)
        self.queue_ready = ReadyWindow()  # its first ready entries (tms.queue_ready)

    # -- submitting -----------------------------------------------------------------------

    def submit(self, tickets: Sequence[Ticket[object]]) -> None:
        """Write the tickets' operations in a group commit; return once each ticket has
        its outcome (blocks the calling thread). ``StorageUnavailableError`` if closed."""
        self._check_open()
        self._commit.run(tickets)

    def submit_async(
        self, tickets: Sequence[Ticket[object]], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[None]:
        """As ``submit``, from ``loop``'s thread: the future resolves once each ticket has
        its outcome."""
        self._check_open()
        return self._commit.submit(tickets, loop)

    def close(self) -> None:
        """Refuse new operations (queued ones are still written)."""
        with self._close_lock:
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailableError(f"the writer of {self.metadata.topic} is closed")

    @property
    def stale(self) -> bool:
        """The store recovered from a failure since this writer was made."""
        return self.fenced or self.epoch != self._tables.epoch

    # -- one batch ----------------------------------------------------------------------

    def _write_batch(self, tickets: list[Ticket[object]]) -> None:
        """Admit, apply and write one batch (see the module docstring)."""
        started = self._monotonic()
        now = self._clock.now_ms()  # one timestamp per batch, unless seq overflows
        batch = _Batch(self, now)
        for ticket in self._admit(tickets, now):
            batch.apply(ticket)
        batch.finish()
        if not batch.rows:
            return
        try:
            self._tables.write(batch.rows, sync=True, epoch=self.epoch, fence=self.fence)
        except TmsError as exc:
            for ticket in batch.applied:
                ticket.fail(exc)
            self._payload_positions.clear()  # positions handed out were not written
            self.queue_rows.clear()  # what the store holds is not known
            self.queue_leases.clear()
            self.queue_ready.clear()
            if isinstance(exc, FencedError):
                self.fenced = True
                self.close()
                if self._on_fenced is not None:
                    self._on_fenced(self)
            return
        except BaseException:
            self.queue_rows.clear()
            self.queue_leases.clear()
            self.queue_ready.clear()
            raise
        batch.written()
        if self._on_batch is not None:
            self._on_batch(self.metadata, batch.stats(len(tickets), self._monotonic() - started))

    def _admit(self, tickets: list[Ticket[object]], now_ms: int) -> list[Ticket[object]]:
        """The tickets that may be applied; the others failed with their reason."""
        lifetime_ms = self._max_lifetime_ms
        uses: list[tuple[int, Use]] = []
        owners: list[Ticket[object]] = []  # the ticket of each use
        late = time.monotonic()
        for ticket in tickets:
            try:
                if ticket.deadline is not None and ticket.deadline < late:
                    raise RequestTimeoutError("dropped unwritten: it waited past its timeout")
                ticket.op.check()
                for wp, use in ticket.op.uses():
                    too_old = wp // MAX_TX_PER_MS + lifetime_ms <= now_ms
                    if too_old and use in (Use.WRITE, Use.MARKER):
                        raise TransactionTooOldError(
                            f"Transaction {wp} has exceeded max lifetime {lifetime_ms} ms"
                        )
                    uses.append((wp, use))
                    owners.append(ticket)
            except TmsError as exc:
                ticket.fail(exc)
        # Only pointers the transaction manager issued (tms.guard); nothing is asked for
        # non-transactional writes, which go on while the transaction service is down.
        for ticket, refusal in zip(owners, self._guard.check(uses) if uses else (), strict=True):
            if refusal is not None and ticket.error is None:
                ticket.fail(refusal)
        return [ticket for ticket in tickets if ticket.error is None]

    # -- positions ----------------------------------------------------------------------

    def _publish_start(self, now_ms: int) -> tuple[int, int]:
        if now_ms > self._ms:
            self._ms, self._next_seq = now_ms, 0
        return self._ms, self._next_seq

    def _next_position(self, now_ms: int) -> tuple[int, int]:
        ms, seq = self._publish_start(now_ms)
        if seq > _MAX_SEQ:
            ms, seq = ms + 1, 0
        self._ms, self._next_seq = ms, seq + 1
        return ms, seq

    def _next_payload_position(self, wp: int, now_ms: int) -> tuple[int, int]:
        last = self._payload_positions.get(wp)
        if last is None:
            if len(self._payload_positions) >= _PAYLOAD_POSITION_CACHE:
                self._payload_positions.clear()
            last = self._tables.payloads.last_position(self.prefix, wp) or (0, -1)
        last_ms, last_seq = last
        if now_ms > last_ms:
            position = (now_ms, 0)
        elif last_seq >= _MAX_SEQ:
            position = (last_ms + 1, 0)
        else:
            position = (last_ms, last_seq + 1)
        self._payload_positions[wp] = position
        return position


class _Batch:
    """The rows of one batch, built operation by operation: the writer's one dispatch
    (``tms.operations.WriteDispatch``)."""

    def __init__(self, writer: TopicWriter, now_ms: int) -> None:
        self._w = writer
        self._tables = writer._tables
        self._prefix = writer.prefix
        self._now = now_ms
        self.rows = TableBatch()
        self.applied: list[Ticket[object]] = []
        self._sealed: dict[int, tuple[int, int]] = {}  # markers of this batch
        self._keyed: dict[str, MarkersResult] = {}
        self._messages = self._payload_bytes = self._rolled_back = 0
        self._published = False
        self._queue: QueueBatch | None = None
        self._queue_config = QueueConfig.of(writer.metadata.properties)

    def apply(self, ticket: Ticket[object]) -> None:
        """Apply one admitted operation; if it fails, it adds nothing."""
        mark = self.rows.mark()
        counts = self._messages, self._payload_bytes, self._rolled_back, self._published
        queue = self._queue
        saved = queue.save() if queue is not None else None
        try:
            ticket.apply(self)
        except TmsError as exc:
            self.rows.truncate(mark)
            self._messages, self._payload_bytes, self._rolled_back, self._published = counts
            if queue is not None and saved is not None:
                queue.restore(saved)  # what a queue operation changed before it failed
            self._queue = queue  # one made by this operation is dropped whole
            ticket.fail(exc)
        else:
            self.applied.append(ticket)

    def written(self) -> None:
        """After the batch was written."""
        if self._queue is not None:
            self._queue.written()

    def finish(self) -> None:
        """After the last operation: what the batch adds once (queue counters)."""
        if self._queue is not None:
            self._queue.finish()
            self._published = self._published or self._queue.became_ready

    def stats(self, operations: int, seconds: float) -> BatchStats:
        return BatchStats(
            operations=operations,
            messages=self._messages,
            payload_bytes=self._payload_bytes,
            rolled_back=self._rolled_back,
            queue_length=operations,
            seconds=seconds,
            published=self._published or self._rolled_back > 0,
            dead_lettered=self._queue.dead_lettered if self._queue is not None else 0,
        )

    def _count(self, request: StoreRequest) -> None:
        self._messages += len(request.payloads)
        self._payload_bytes += sum(map(len, request.payloads))

    # -- WriteDispatch ------------------------------------------------------------------

    def _not_queue(self) -> None:
        if self._queue_config is not None:
            raise TmsInvalidArgumentError(
                f"{self._w.metadata.topic} is a queue: enqueue and receive, not publish"
            )

    def publish(self, op: Publish) -> RollbackDetail | None:
        self._not_queue()
        request = op.request
        wp = request.tx_write_pointer
        if not request.payloads:
            assert wp is not None  # Publish.check
            return self._marker(wp, self._sealed)
        start = self._w._publish_start(self._now)
        first, last = self.rows.append_messages(
            self._prefix, start, wp, request.payloads, request.ttls
        )
        self._w._ms, self._w._next_seq = last[0], last[1] + 1
        self._count(request)
        self._published = True
        return None if wp is None else RollbackDetail(wp, *first, *last)

    def store(self, op: Store) -> None:
        self._not_queue()
        request = op.request
        wp = request.tx_write_pointer
        assert wp is not None  # Store.check
        if wp in self._sealed or self._tables.payloads.seal_of(self._prefix, wp) is not None:
            raise TmsInvalidArgumentError(
                f"transaction {wp} already published its commit marker to {request.topic}; "
                "payloads stored now would never be seen"
            )
        rows = [
            PayloadRow(
                wp, *self._w._next_payload_position(wp, self._now), payload, request.ttl_of(i)
            )
            for i, payload in enumerate(request.payloads)
        ]
        self.rows.put_payloads(self._prefix, rows)
        self._count(request)

    def rollback(self, op: Rollback) -> int:
        count = self._tables.messages.rollback(self._prefix, op.detail, self.rows)
        self._rolled_back += count
        return count

    def markers(self, op: Markers) -> MarkersResult:
        self._not_queue()
        request = op.request
        key = request.idempotency_key
        if key is not None:
            earlier = self._keyed.get(key)
            if earlier is None:
                stored = self._tables.idempotency.get(self._prefix, key)
                earlier = MarkersResult(stored[1]) if stored is not None else None
            if earlier is not None:
                return MarkersResult(earlier.details, duplicate=True)
        sealed = dict(self._sealed)  # kept only if every marker could be made
        details = tuple(self._marker(wp, sealed) for wp in request.write_pointers)
        self._sealed = sealed
        result = MarkersResult(details)
        if key is not None:
            self._keyed[key] = result
            self.rows.put_idempotency(self._prefix, key, self._now, details)
        return result

    def write_position(self, op: WritePosition) -> None:
        self.rows.delete_positions(self._prefix, op.name, op.superseded)
        self.rows.put_position(
            self._prefix,
            op.name,
            op.write_pointer,
            stamp=op.stamp,
            position=op.position,
            written_ms=op.written_ms,
        )

    def rollback_position(self, op: RollbackPosition) -> int:
        if not self._tables.positions.exists(self._prefix, op.name, op.write_pointer):
            return 0
        self.rows.delete_positions(self._prefix, op.name, [op.write_pointer])
        return 1

    def _marker(self, wp: int, sealed: dict[int, tuple[int, int]]) -> RollbackDetail:
        """A commit marker: published once per write pointer (see the module docstring)."""
        existing = sealed.get(wp) or self._tables.payloads.seal_of(self._prefix, wp)
        if existing is not None and (wp in sealed or self._entry_pointer(existing) == wp):
            return RollbackDetail(wp, *existing, *existing)
        position = self._w._next_position(self._now)
        sealed[wp] = position
        self.rows.put_marker(self._prefix, position, wp)
        self._published = True
        return RollbackDetail(wp, *position, *position)

    def _entry_pointer(self, position: tuple[int, int]) -> int | None:
        entry = self._tables.messages.get(self._prefix, *position)
        return entry.tx_write_pointer if entry is not None else None

    # -- queues (tms.queue_batch) -------------------------------------------------------

    def _queue_batch(self) -> QueueBatch:
        config = check_queue(self._queue_config, self._w.metadata.topic)
        if self._queue is None:
            w = self._w
            self._queue = QueueBatch(
                self._tables.queues,
                self._prefix,
                config,
                self.rows,
                self._now,
                next_id=lambda: queue_id(*w._next_position(self._now)),
                guard=w._guard,
                rng=w._rng,
                floors=w.queue_floors,
                cache=w.queue_rows,
                leases=w.queue_leases,
                ready=w.queue_ready,
            )
        return self._queue

    def enqueue(self, op: Enqueue) -> tuple[Enqueued, ...]:
        result = self._queue_batch().enqueue(op.request)
        self._messages += sum(not e.duplicate for e in result)
        self._payload_bytes += sum(len(i.payload) for i in op.request.items)
        return result

    def receive(self, op: Receive) -> ReceiveResult:
        return self._queue_batch().receive(op.request)

    def ack(self, op: Ack) -> tuple[AckOutcome, ...]:
        return self._queue_batch().ack(op.request)

    def nack(self, op: Nack) -> tuple[AckOutcome, ...]:
        return self._queue_batch().nack(op.request)

    def settle(self, op: Settle) -> int:
        return self._queue_batch().settle(op.request)

    def maintain(self, op: Maintain) -> int:
        return self._queue_batch().maintain(op.purge)

    def dead_letter_in(self, op: DeadLetterIn) -> int:
        return self._queue_batch().dead_letter_in(op.origin, op.messages)

    def dead_letter_done(self, op: DeadLetterDone) -> int:
        return self._queue_batch().dead_letter_done(op.target, op.ids)
