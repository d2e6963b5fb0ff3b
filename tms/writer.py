"""``TopicWriter``: the single writer of one topic generation, with group commit.

Every publish, store and rollback of a topic goes through its writer. Callers queue their
operation; whoever finds no write running becomes the leader, takes *everything* queued,
turns it into rows and writes them in **one synced, atomic batch**, then wakes the
others. So:

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
* a subscription's transactional position (``tms.positions``: ``position`` writes one,
  ``unposition`` removes one) is written in the batch like a message, under the
  topic generation's prefix;
* an operation that is invalid on its own fails alone; a storage failure fails the
  whole batch and nothing of it is written.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tms.codec import keys
from tms.codec.values import MessageEntry, encode_message_value
from tms.errors import StorageUnavailableError, TmsError, TmsInvalidArgumentError
from tms.model import MarkersRequest, MarkersResult, RollbackDetail, StoreRequest, TopicMetadata
from tms.store.kv import WriteOp
from tms.store.tables import (
    MESSAGE_TABLE,
    IdempotencyTable,
    MessageRow,
    MessageTable,
    PayloadRow,
    PayloadTable,
    Tables,
)
from txn.clock import Clock

__all__ = ["BatchStats", "TopicWriter"]

_MAX_SEQ = 0xFFFF
_POSITION = struct.Struct(">qH")
_PAYLOAD_POSITION_CACHE = 10_000


@dataclass(slots=True)
class _Op:
    kind: str  # "publish" | "store" | "rollback" | "markers" | "position" | "unposition"
    arg: Any
    result: Any = None
    error: BaseException | None = None
    done: bool = False


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one group-committed batch did (for metrics and notifications)."""

    operations: int
    messages: int
    payload_bytes: int
    rolled_back: int
    queue_length: int
    seconds: float
    published: bool = field(default=False)


class TopicWriter:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        tables: Tables,
        metadata: TopicMetadata,
        clock: Clock,
        *,
        on_batch: Callable[[TopicMetadata, BatchStats], None] | None = None,
        monotonic: Callable[[], float] = time.perf_counter,
        epoch: int | None = None,
    ) -> None:
        self.metadata = metadata
        self._tables = tables
        self._clock = clock
        self._on_batch = on_batch
        self._monotonic = monotonic
        self._prefix = keys.topic_prefix(metadata.topic, metadata.generation)
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Op] = []
        self._writing = False
        self._closed = False
        # Everything this writer knows (the metadata, the positions below) is from this
        # epoch of the store; its writes are refused once the store recovered from a
        # failure (a failed write may have landed after all), and it is replaced.
        self.epoch = tables.kv.epoch if epoch is None else epoch
        # Continue after every earlier generation too: a rollback token of a deleted
        # generation must never cover positions of the new one.
        last = tables.messages.last_position(self._prefix, earlier_generations=True)
        self._ms, self._next_seq = (last[0], last[1] + 1) if last is not None else (0, 0)
        self._payload_positions: dict[int, tuple[int, int]] = {}
        self._now = 0

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    # -- public operations --------------------------------------------------------------

    def publish(self, request: StoreRequest) -> RollbackDetail | None:
        """Append ``request``'s messages; the rollback range for a transactional one."""
        result: RollbackDetail | None = self._one(self._op("publish", request))
        return result

    def store(self, request: StoreRequest) -> None:
        """Stage ``request``'s payloads in the payload table under its write pointer."""
        self._one(self._op("store", request))

    def rollback(self, detail: RollbackDetail) -> int:
        """Negate the write pointer of ``detail``'s entries; how many were negated."""
        count: int = self._one(self._op("rollback", detail))
        return count

    def submit(self, operations: Sequence[tuple[str, Any]]) -> list[Any]:
        """Run several operations (``(kind, argument)`` as for the methods above) in one
        group commit: for each, in order, its result or the ``TmsError`` it failed with.
        The others' outcomes do not depend on one failing. Blocks until all are durable."""
        ops: list[_Op] = []
        for kind, arg in operations:
            try:
                ops.append(self._op(kind, arg))
            except TmsError as exc:
                ops.append(_Op(kind, arg, error=exc, done=True))
        self._submit([op for op in ops if not op.done])
        return [op.error if op.error is not None else op.result for op in ops]

    def close(self) -> None:
        """Refuse new operations (queued ones are still written)."""
        with self._cond:
            self._closed = True

    @staticmethod
    def _op(kind: str, arg: Any) -> _Op:
        """An operation, checked on its own."""
        if kind == "publish":
            if not arg.payloads and not arg.transactional:
                raise TmsInvalidArgumentError(
                    "Empty payload is only allowed for publishing transactional message. "
                    f"Topic: {arg.topic}"
                )
        elif kind == "store":
            if not arg.transactional or not arg.payloads:
                raise TmsInvalidArgumentError(
                    f"Store request must be transactional with payload. Topic: {arg.topic}"
                )
        elif kind not in ("rollback", "markers", "position", "unposition"):
            raise TmsInvalidArgumentError(f"unknown write operation {kind!r}")
        return _Op(kind, arg)

    # -- group commit -------------------------------------------------------------------

    def _one(self, op: _Op) -> Any:
        self._submit([op])
        if op.error is not None:
            raise op.error
        return op.result

    def _submit(self, ops: list[_Op]) -> None:
        if not ops:
            return
        with self._cond:
            if self._closed:
                raise StorageUnavailableError(f"the writer of {self.metadata.topic} is closed")
            # Queued together, so a leader takes them all at once: one is done when all are.
            self._queue.extend(ops)
            while not ops[0].done:
                if not self._writing:
                    self._writing = True
                    batch, self._queue = self._queue, []
                    break
                self._cond.wait()
            else:
                return
        try:
            stats = self._write_batch(batch)
        finally:
            with self._cond:
                self._writing = False
                for queued in batch:
                    queued.done = True
                self._cond.notify_all()
        if stats is not None and self._on_batch is not None:
            self._on_batch(self.metadata, stats)

    @property
    def stale(self) -> bool:
        """The store recovered from a failure since this writer was made."""
        return self.epoch != self._tables.kv.epoch

    def _write_batch(self, batch: list[_Op]) -> BatchStats | None:
        started = self._monotonic()
        self._now = self._clock.now_ms()  # one timestamp per batch, unless seq overflows
        queue_length = len(batch)
        ops: list[WriteOp] = []
        messages = payload_bytes = rolled_back = 0
        sealed: dict[int, tuple[int, int]] = {}
        keyed: dict[str, MarkersResult] = {}
        published = False
        for op in batch:
            try:
                if op.kind == "publish":
                    request: StoreRequest = op.arg
                    publish_ops, op.result = self._publish_ops(request, sealed)
                    ops.extend(publish_ops)
                    messages += len(request.payloads)
                    payload_bytes += sum(map(len, request.payloads))
                    published = published or bool(publish_ops)
                elif op.kind == "markers":
                    marker_ops, op.result = self._markers_ops(op.arg, sealed, keyed)
                    ops.extend(marker_ops)
                    published = published or bool(marker_ops)
                elif op.kind == "position":
                    ops.extend(op.arg.write_ops(self._prefix))
                elif op.kind == "unposition":
                    removals = op.arg.write_ops(self._tables.positions, self._prefix)
                    op.result = len(removals)
                    ops.extend(removals)
                elif op.kind == "store":
                    request = op.arg
                    ops.extend(PayloadTable.ops(self._prefix, self._store_rows(request, sealed)))
                    messages += len(request.payloads)
                    payload_bytes += sum(map(len, request.payloads))
                else:
                    negations = self._tables.messages.rollback_ops(self._prefix, op.arg)
                    op.result = len(negations)
                    ops.extend(negations)
                    rolled_back += len(negations)
            except TmsError as exc:
                op.error = exc
        if not ops:
            return None
        try:
            self._tables.kv.write(ops, sync=True, epoch=self.epoch)
        except TmsError as exc:
            for op in batch:
                if op.error is None:
                    op.error = exc
                    op.result = None
            self._payload_positions.clear()  # positions handed out were not written
            return None
        return BatchStats(
            operations=len(batch),
            messages=messages,
            payload_bytes=payload_bytes,
            rolled_back=rolled_back,
            queue_length=queue_length,
            seconds=self._monotonic() - started,
            published=published or rolled_back > 0,
        )

    # -- rows ---------------------------------------------------------------------------

    def _next_position(self) -> tuple[int, int]:
        now = self._now
        if now > self._ms:
            self._ms, self._next_seq = now, 0
        elif self._next_seq > _MAX_SEQ:
            self._ms, self._next_seq = self._ms + 1, 0
        position = (self._ms, self._next_seq)
        self._next_seq += 1
        return position

    def _publish_ops(
        self, request: StoreRequest, sealed: dict[int, tuple[int, int]]
    ) -> tuple[list[WriteOp], RollbackDetail | None]:
        wp = request.tx_write_pointer
        payloads = request.payloads
        if not payloads:
            assert wp is not None
            return self._marker_ops(wp, sealed)
        # The hot path of publishing: positions, keys and values built in one loop.
        now = self._now
        if now > self._ms:
            self._ms, self._next_seq = now, 0
        ms, seq = self._ms, self._next_seq
        prefix, pack = self._prefix, _POSITION.pack
        ops: list[WriteOp] = []
        first: tuple[int, int] | None = None
        ttls = request.ttls
        if ttls is None:
            head = b"\x00" if wp is None else b"\x01" + wp.to_bytes(8, "big", signed=True)
        for i, payload in enumerate(payloads):
            if seq > _MAX_SEQ:
                ms, seq = ms + 1, 0
            if first is None:
                first = (ms, seq)
            if ttls is None:
                value = head + payload
            else:
                value = encode_message_value(MessageEntry(wp, payload, ttls[i]))
            ops.append((MESSAGE_TABLE, prefix + pack(ms, seq), value))
            seq += 1
        self._ms, self._next_seq = ms, seq
        if wp is None:
            return ops, None
        assert first is not None
        return ops, RollbackDetail(wp, first[0], first[1], ms, seq - 1)

    def _marker_ops(
        self, wp: int, sealed: dict[int, tuple[int, int]]
    ) -> tuple[list[WriteOp], RollbackDetail]:
        """A commit marker: published once per write pointer (see the module docstring)."""
        existing = sealed.get(wp) or self._tables.payloads.seal_of(self._prefix, wp)
        if existing is not None and (wp in sealed or self._entry_pointer(existing) == wp):
            return [], RollbackDetail(wp, existing[0], existing[1], existing[0], existing[1])
        ms, seq = self._next_position()
        sealed[wp] = (ms, seq)
        ops = MessageTable.ops(self._prefix, [MessageRow(ms, seq, MessageEntry(wp, None))])
        ops.append(PayloadTable.seal_op(self._prefix, wp, (ms, seq)))
        return ops, RollbackDetail(wp, ms, seq, ms, seq)

    def _markers_ops(
        self,
        request: MarkersRequest,
        sealed: dict[int, tuple[int, int]],
        keyed: dict[str, MarkersResult],
    ) -> tuple[list[WriteOp], MarkersResult]:
        """Several markers as one operation (see ``MarkersRequest``)."""
        key = request.idempotency_key
        if key is not None:
            earlier = keyed.get(key)
            if earlier is None:
                stored = self._tables.idempotency.get(self._prefix, key)
                earlier = MarkersResult(stored[1]) if stored is not None else None
            if earlier is not None:
                return [], MarkersResult(earlier.details, duplicate=True)
        mine = dict(sealed)  # merged only if every marker could be made
        ops: list[WriteOp] = []
        details = []
        for wp in request.write_pointers:
            marker_ops, detail = self._marker_ops(wp, mine)
            ops.extend(marker_ops)
            details.append(detail)
        sealed.update(mine)
        result = MarkersResult(tuple(details))
        if key is not None:
            keyed[key] = result
            ops.append(IdempotencyTable.op(self._prefix, key, self._now, details))
        return ops, result

    def _entry_pointer(self, position: tuple[int, int]) -> int | None:
        entry = self._tables.messages.get(self._prefix, *position)
        return entry.tx_write_pointer if entry is not None else None

    def _store_rows(
        self, request: StoreRequest, sealed: dict[int, tuple[int, int]]
    ) -> list[PayloadRow]:
        wp = request.tx_write_pointer
        assert wp is not None
        if wp in sealed or self._tables.payloads.seal_of(self._prefix, wp) is not None:
            raise TmsInvalidArgumentError(
                f"transaction {wp} already published its commit marker to {request.topic}; "
                "payloads stored now would never be seen"
            )
        rows = []
        for i, payload in enumerate(request.payloads):
            ms, seq = self._next_payload_position(wp)
            rows.append(PayloadRow(wp, ms, seq, payload, request.ttl_of(i)))
        return rows

    def _next_payload_position(self, wp: int) -> tuple[int, int]:
        last = self._payload_positions.get(wp)
        if last is None:
            if len(self._payload_positions) >= _PAYLOAD_POSITION_CACHE:
                self._payload_positions.clear()
            last = self._tables.payloads.last_position(self._prefix, wp) or (0, -1)
        last_ms, last_seq = last
        now = self._now
        if now > last_ms:
            position = (now, 0)
        elif last_seq >= _MAX_SEQ:
            position = (last_ms + 1, 0)
        else:
            position = (last_ms, last_seq + 1)
        self._payload_positions[wp] = position
        return position
