"""``Tables``: the messaging tables over one ``KeyValueStore``, the repository everything
else reads and writes rows through. Only this package and ``tms.codec`` know row bytes:
callers hand in and get back value objects and positions, and describe writes in a
``TableBatch``, which ``Tables.write`` applies atomically (``tms.store.kv``).

* ``MessageTable``: rows keyed (topic, generation, publish_ms, seq); values carry the
  optional transaction write pointer and the optional payload (``tms.codec.values``).
* ``PayloadTable``: rows keyed (topic, generation, write pointer, write_ms, seq), written
  ahead of a transaction's commit marker, and one *seal* row per write pointer whose
  marker was published (after its payload rows, holding the marker's position).
* ``MetadataTable`` (``tms.store.metadata``): one row per topic, with its generation.
* ``IdempotencyTable``: rows keyed (topic, generation, key) holding the outcome of a
  keyed ``MarkersRequest``; they expire with the topic's TTL.
* ``PositionTable`` (``tms.store.positions``): subscriptions' positions written under a
  transaction's write pointer, keyed (topic, generation, subscription, write pointer).

Cleanup's row work is here too (``purge_topic``, ``negate_invalid``): which rows are past
a time or of an old generation is a question about their keys.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from tms.codec import keys
from tms.codec.subscriptions import encode_position_value, position_key
from tms.codec.values import (
    MessageEntry,
    MessageRowView,
    PayloadRowView,
    decode_idempotency_value,
    decode_message_rows,
    decode_message_value,
    decode_payload_rows,
    decode_payload_value,
    decode_seal_value,
    encode_idempotency_value,
    encode_message_value,
    encode_payload_value,
    encode_seal_value,
    idempotency_write_ms,
    message_head,
    negate_message_value,
)
from tms.ids import MessageId
from tms.model import RollbackDetail, TopicMetadata
from tms.store.kv import Fence, KeyValueStore, TableStore, Update, WriteOp
from tms.store.metadata import MetadataTable
from tms.store.positions import POSITION_TABLE, PositionTable
from tms.store.queues import QueueTables

__all__ = [
    "IdempotencyTable",
    "MessageRow",
    "MessageTable",
    "MetadataTable",
    "PayloadRow",
    "PayloadTable",
    "PurgeCounts",
    "TableBatch",
    "Tables",
    "is_older_generation",
]

MESSAGE_TABLE = b"m"
PAYLOAD_TABLE = b"p"
METADATA_TABLE = b"t"
IDEMPOTENCY_TABLE = b"k"

_MAX_SEQ = 0xFFFF


@dataclass(frozen=True, slots=True)
class MessageRow:
    publish_ms: int
    seq: int
    entry: MessageEntry


@dataclass(frozen=True, slots=True)
class PayloadRow:
    tx_write_pointer: int
    write_ms: int
    p_seq: int
    payload: bytes
    ttl_s: int | None


@dataclass(frozen=True, slots=True)
class PurgeCounts:
    """Rows ``Tables.purge_topic`` deleted, by why."""

    expired: int = 0
    old_generation: int = 0


def is_older_generation(data_generation: int, current: int) -> bool:
    """CDAP's rule: data of a generation below the current one, or of the deleted one."""
    return data_generation < abs(current) or (current < 0 and data_generation == abs(current))


class TableBatch:
    """Changes to the tables of one store, applied together by ``Tables.write``: all or
    none, in the order added. Not thread-safe (one writer builds it).

    ``appended`` counts the ops added by ``append_messages`` and ``put_payloads``, whose
    keys are new positions; when every op is one of them, the batch only adds rows
    (``new_keys``, a hint to the store).

    ``updates`` (negations: ``MessageTable.rollback``, ``Tables.negate_invalid``) are
    written after ``ops``, each only if its row is still there then (``tms.store.kv``):
    they rewrite rows read earlier, which another instance's purge may have deleted
    since."""

    __slots__ = ("appended", "ops", "updates")

    def __init__(self) -> None:
        self.ops: list[WriteOp] = []
        self.updates: list[Update] = []
        self.appended = 0

    @property
    def new_keys(self) -> bool:
        """Whether every op is a row at a new position (see the class docstring)."""
        return self.appended == len(self.ops)

    def __len__(self) -> int:
        return len(self.ops) + len(self.updates)

    def mark(self) -> tuple[int, int, int]:
        """Where the batch stands, for ``truncate``."""
        return len(self.ops), len(self.updates), self.appended

    def truncate(self, mark: tuple[int, int, int]) -> None:
        """Drop every change added since ``mark``."""
        del self.ops[mark[0] :]
        del self.updates[mark[1] :]
        self.appended = mark[2]

    def append_messages(
        self,
        prefix: bytes,
        start: tuple[int, int],
        tx_write_pointer: int | None,
        payloads: Sequence[bytes],
        ttls: Sequence[int | None] | None = None,
    ) -> tuple[tuple[int, int], tuple[int, int]]:
        """Message rows of one topic generation (``prefix``) for ``payloads`` (at least
        one), at consecutive positions from ``start`` = (ms, seq) — a seq past 65,535
        continues at (ms + 1, 0) — under ``tx_write_pointer`` (None: not transactional),
        with a TTL per payload when ``ttls`` is given; the first and last position."""
        # The hot path of publishing: keys and values built in one loop.
        ms, seq = start
        if seq > _MAX_SEQ:
            ms, seq = ms + 1, 0
        first = (ms, seq)
        pack, ops = keys.pack_position, self.ops
        head = message_head(tx_write_pointer)
        for i, payload in enumerate(payloads):
            if seq > _MAX_SEQ:
                ms, seq = ms + 1, 0
            if ttls is None:
                value = head + payload
            else:
                value = encode_message_value(MessageEntry(tx_write_pointer, payload, ttls[i]))
            ops.append((MESSAGE_TABLE, prefix + pack(ms, seq), value))
            seq += 1
        self.appended += len(payloads)
        return first, (ms, seq - 1)

    def put_marker(self, prefix: bytes, position: tuple[int, int], tx_write_pointer: int) -> None:
        """A commit marker at ``position`` (a reference to the write pointer's payload
        rows), and the seal row that records it."""
        entry = encode_message_value(MessageEntry(tx_write_pointer, None))
        self.ops.append((MESSAGE_TABLE, keys.message_key(prefix, *position), entry))
        seal = keys.payload_key(prefix, tx_write_pointer, *keys.SEAL_POSITION)
        self.ops.append((PAYLOAD_TABLE, seal, encode_seal_value(position)))

    def put_payloads(self, prefix: bytes, rows: Sequence[PayloadRow]) -> None:
        for r in rows:
            key = keys.payload_key(prefix, r.tx_write_pointer, r.write_ms, r.p_seq)
            self.ops.append((PAYLOAD_TABLE, key, encode_payload_value(r.payload, r.ttl_s)))
        self.appended += len(rows)

    def put_position(
        self,
        prefix: bytes,
        name: str,
        write_pointer: int,
        *,
        stamp: int,
        position: MessageId,
        written_ms: int,
    ) -> None:
        """A subscription's position under a write pointer (``tms.positions``)."""
        value = encode_position_value(stamp, position, written_ms)
        self.ops.append((POSITION_TABLE, position_key(prefix, name, write_pointer), value))

    def delete_positions(self, prefix: bytes, name: str, write_pointers: Sequence[int]) -> None:
        for wp in write_pointers:
            self.ops.append((POSITION_TABLE, position_key(prefix, name, wp), None))

    def put_idempotency(
        self, prefix: bytes, key: str, write_ms: int, details: Sequence[RollbackDetail]
    ) -> None:
        value = encode_idempotency_value(write_ms, details)
        self.ops.append((IDEMPOTENCY_TABLE, keys.idempotency_key(prefix, key), value))


class MessageTable:
    def __init__(self, store: TableStore) -> None:
        self.store = store

    def write(self, prefix: bytes, rows: Sequence[MessageRow]) -> None:
        """Write ``rows`` of one topic generation atomically and durably (tests, tools)."""
        self.store.write(
            [
                (keys.message_key(prefix, r.publish_ms, r.seq), encode_message_value(r.entry))
                for r in rows
            ]
        )

    def get(self, prefix: bytes, publish_ms: int, seq: int) -> MessageEntry | None:
        value = self.store.get(keys.message_key(prefix, publish_ms, seq))
        return decode_message_value(value) if value is not None else None

    def entries(
        self, prefix: bytes, start: tuple[int, int] = (0, 0)
    ) -> Iterator[list[MessageRowView]]:
        """The rows from (publish_ms, seq) ``start`` to the end of the topic generation, as
        reads take them (``tms.codec.values.MessageRowView``), a chunk at a time."""
        start_key = keys.message_key(prefix, *start)
        rows = self.store.scan_chunks(start_key, keys.stop_key_for_prefix(prefix))
        return map(decode_message_rows, rows)

    def scan(self, prefix: bytes, start: tuple[int, int] = (0, 0)) -> Iterator[MessageRow]:
        """Decoded rows from (publish_ms, seq) ``start`` to the end of the topic generation."""
        stop = keys.stop_key_for_prefix(prefix)
        for key, value in self.store.scan(keys.message_key(prefix, *start), stop):
            _gen, publish_ms, seq = keys.decode_message_key(key)
            yield MessageRow(publish_ms, seq, decode_message_value(value))

    def scan_back(
        self, prefix: bytes, through: tuple[int, int] | None = None
    ) -> Iterator[MessageRow]:
        """Decoded rows of a topic generation newest first, from the row at (publish_ms,
        seq) ``through`` (None: the newest) down to the oldest."""
        stop = (
            keys.message_key(prefix, *through) + b"\x00"
            if through is not None
            else keys.stop_key_for_prefix(prefix)
        )
        for key, value in self.store.scan(prefix, stop, reverse=True):
            _gen, publish_ms, seq = keys.decode_message_key(key)
            yield MessageRow(publish_ms, seq, decode_message_value(value))

    def first_position(self, prefix: bytes) -> tuple[int, int] | None:
        """(publish_ms, seq) of the oldest row of a topic generation, if any."""
        for key, _value in self.store.scan(prefix, keys.stop_key_for_prefix(prefix)):
            _gen, publish_ms, seq = keys.decode_message_key(key)
            return publish_ms, seq
        return None

    def approximate_bytes(self, prefix: bytes, until: tuple[int, int] | None = None) -> int:
        """The store's estimate of the bytes a topic generation's rows take (only those
        before (publish_ms, seq) ``until`` when given); 0 when it cannot say."""
        stop = (
            keys.message_key(prefix, *until)
            if until is not None
            else keys.stop_key_for_prefix(prefix)
        )
        return self.store.approximate_size(prefix, stop)

    def last_position(
        self, prefix: bytes, *, earlier_generations: bool = False
    ) -> tuple[int, int] | None:
        """(publish_ms, seq) of the newest row of a topic generation, if any; with
        ``earlier_generations`` of the newest row of this or any earlier generation."""
        start = prefix[:-4] if earlier_generations else prefix
        for key, _value in self.store.scan(start, keys.stop_key_for_prefix(prefix), reverse=True):
            _gen, publish_ms, seq = keys.decode_message_key(key)
            return publish_ms, seq
        return None

    def rollback(self, prefix: bytes, detail: RollbackDetail, batch: TableBatch) -> int:
        """Negate the write pointer of every entry of ``detail``'s range written by its
        transaction, as ``updates`` of ``batch`` (an entry purged before the batch is
        written stays purged); how many. Entries of other writers in the range (there
        should be none) and entries already negated are left alone."""
        start = keys.message_key(prefix, detail.start_ms, detail.start_seq)
        stop = keys.stop_key_for_prefix(keys.message_key(prefix, detail.end_ms, detail.end_seq))
        count = 0
        for key, value in self.store.scan(start, stop):
            if decode_message_value(value).tx_write_pointer == detail.tx_write_pointer:
                negated = negate_message_value(value)
                if negated is not None:
                    batch.updates.append((MESSAGE_TABLE, key, negated))
                    count += 1
        return count


class PayloadTable:
    """Payload rows, plus one *seal* row per write pointer whose commit marker was
    published: it sits after every payload row of the write pointer (at
    ``keys.SEAL_POSITION``) and holds the marker's (publish_ms, seq)."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def write(self, prefix: bytes, rows: Sequence[PayloadRow]) -> None:
        """Write ``rows`` of one topic generation atomically and durably (tests, tools)."""
        batch = TableBatch()
        batch.put_payloads(prefix, rows)
        self.store.write([(key, value) for _t, key, value in batch.ops if value is not None])

    def seal_of(self, prefix: bytes, tx_write_pointer: int) -> tuple[int, int] | None:
        """The (publish_ms, seq) of the commit marker that sealed ``tx_write_pointer``."""
        value = self.store.get(keys.payload_key(prefix, tx_write_pointer, *keys.SEAL_POSITION))
        return decode_seal_value(value) if value is not None else None

    def _range(
        self, prefix: bytes, tx_write_pointer: int, start: tuple[int, int]
    ) -> tuple[bytes, bytes]:
        """The keys of one write pointer's payload rows from ``start``, without the seal."""
        return (
            keys.payload_key(prefix, tx_write_pointer, *start),
            keys.payload_key(prefix, tx_write_pointer, *keys.SEAL_POSITION),
        )

    def entries(
        self, prefix: bytes, tx_write_pointer: int, start: tuple[int, int] = (0, 0)
    ) -> Iterator[list[PayloadRowView]]:
        """The payload rows of one write pointer from (write_ms, p_seq) ``start``, the seal
        row excluded, as reads take them (``tms.codec.values.PayloadRowView``), a chunk at
        a time."""
        return map(
            decode_payload_rows,
            self.store.scan_chunks(*self._range(prefix, tx_write_pointer, start)),
        )

    def scan(
        self,
        prefix: bytes,
        tx_write_pointer: int,
        start: tuple[int, int] = (0, 0),
        *,
        inclusive: bool = True,
    ) -> Iterator[PayloadRow]:
        """Decoded rows of one write pointer from (write_ms, p_seq) ``start``, the seal row
        excluded; with ``inclusive=False`` a row exactly at ``start`` is skipped."""
        for key, value in self.store.scan(*self._range(prefix, tx_write_pointer, start)):
            _gen, wp, write_ms, p_seq = keys.decode_payload_key(key)
            if not inclusive and (write_ms, p_seq) == start:
                continue
            payload, ttl = decode_payload_value(value)
            yield PayloadRow(wp, write_ms, p_seq, payload, ttl)

    def last_position(self, prefix: bytes, tx_write_pointer: int) -> tuple[int, int] | None:
        """(write_ms, p_seq) of the newest row of the write pointer (its seal, if sealed)."""
        wp_prefix = keys.payload_prefix(prefix, tx_write_pointer)
        for key, _value in self.store.scan(
            wp_prefix, keys.stop_key_for_prefix(wp_prefix), reverse=True
        ):
            _gen, _wp, write_ms, p_seq = keys.decode_payload_key(key)
            return write_ms, p_seq
        return None


class IdempotencyTable:
    """Outcomes of keyed marker requests (see ``tms.model.MarkersRequest``)."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def get(self, prefix: bytes, key: str) -> tuple[int, tuple[RollbackDetail, ...]] | None:
        """(write_ms, rollback ranges) recorded under ``key``, or None."""
        value = self.store.get(keys.idempotency_key(prefix, key))
        return decode_idempotency_value(value) if value is not None else None


class Tables:
    """The tables of one store (see the module docstring). Thread-safe as the store is."""

    def __init__(self, store: KeyValueStore) -> None:
        self.kv = store
        self.messages = MessageTable(store.table(MESSAGE_TABLE))
        self.payloads = PayloadTable(store.table(PAYLOAD_TABLE))
        self.metadata = MetadataTable(store, METADATA_TABLE)
        self.idempotency = IdempotencyTable(store.table(IDEMPOTENCY_TABLE))
        self.queues = QueueTables(store)
        self.positions = PositionTable(store.table(POSITION_TABLE))

    @property
    def epoch(self) -> int:
        """The store's epoch (``tms.store.kv``)."""
        return self.kv.epoch

    def write(
        self,
        batch: TableBatch,
        *,
        sync: bool = True,
        epoch: int | None = None,
        fence: Fence | None = None,
    ) -> None:
        """Apply ``batch`` atomically (durably with ``sync``), its ``updates`` only to rows
        still there; with ``epoch``, only if the store has not recovered from a failure
        since; with ``fence``, only while it is the newest (``FencedError``). Raises
        ``StorageUnavailableError``."""
        if batch.ops or batch.updates:
            self.kv.write(
                batch.ops,
                sync=sync,
                epoch=epoch,
                fence=fence,
                updates=batch.updates,
                new_keys=batch.new_keys,
            )

    def topic_bytes(self, metadata: TopicMetadata) -> int:
        """Approximately how many bytes a topic's current generation takes (both tables)."""
        prefix = keys.topic_prefix(metadata.topic, metadata.generation)
        stop = keys.stop_key_for_prefix(prefix)
        return self.messages.store.approximate_size(
            prefix, stop
        ) + self.payloads.store.approximate_size(prefix, stop)

    # -- maintenance (cleanup) ------------------------------------------------------------

    def purge_topic(self, metadata: TopicMetadata, cutoff_ms: int, batch_rows: int) -> PurgeCounts:
        """Delete the topic's rows of older generations (all of them once it is deleted) and
        those older than ``cutoff_ms``: message rows by publish time (they are in time
        order: the scan stops at the first live one), payload rows by write time, a seal
        row with its marker, idempotency rows by when they were written, subscriptions'
        position rows of older generations (``tms.subscriptions`` cleans the current
        one's). Written in
        unsynced batches of ``batch_rows`` (a crash only leaves some for the next run)."""
        current = metadata.generation
        name_prefix = keys.topic_name_prefix(metadata.topic)
        n = len(name_prefix)
        stop = keys.stop_key_for_prefix(name_prefix)
        expired = old = 0
        batch = TableBatch()

        def delete(table: bytes, key: bytes) -> TableBatch:
            batch.ops.append((table, key, None))
            if len(batch) < batch_rows:
                return batch
            self.write(batch, sync=False)
            return TableBatch()

        for key, _value in self.messages.store.scan(name_prefix, stop):
            if is_older_generation(keys.generation_of(key, n), current):
                old += 1
            elif keys.decode_message_key(key)[1] < cutoff_ms:
                expired += 1
            else:
                break  # current generation, time-ordered: the rest is live
            batch = delete(MESSAGE_TABLE, key)
        for key, value in self.payloads.store.scan(name_prefix, stop):
            generation, _wp, write_ms, _seq = keys.decode_payload_key(key)
            if is_older_generation(generation, current):
                old += 1
            elif write_ms == keys.SEAL_POSITION[0]:
                if decode_seal_value(value)[0] >= cutoff_ms:
                    continue
                expired += 1
            elif write_ms < cutoff_ms:
                expired += 1
            else:
                continue  # payload rows are ordered by write pointer, not time
            batch = delete(PAYLOAD_TABLE, key)
        for key, value in self.idempotency.store.scan(name_prefix, stop):
            if is_older_generation(keys.generation_of(key, n), current):
                old += 1
            elif idempotency_write_ms(value) < cutoff_ms:
                expired += 1
            else:
                continue  # keyed by name, not time
            batch = delete(IDEMPOTENCY_TABLE, key)
        for table, key in self.queues.old_generation_rows(
            name_prefix, lambda generation: is_older_generation(generation, current)
        ):
            old += 1
            batch = delete(table, key)
        for key, _value in self.positions.store.scan(name_prefix, stop):
            if is_older_generation(keys.generation_of(key, n), current):
                old += 1
                batch = delete(POSITION_TABLE, key)
        self.write(batch, sync=False)
        return PurgeCounts(expired, old)

    def negate_invalid(
        self, metadata: TopicMetadata, invalid: Collection[int], from_ms: int, batch_rows: int
    ) -> int:
        """Negate every entry of the topic's current generation from ``from_ms`` on that
        carries one of the ``invalid`` write pointers (it then reads as rolled back);
        durably, in synced batches of ``batch_rows``. How many were negated.

        It runs on any instance, unfenced, beside the owner's writer and other
        instances' purges: each negation is an update (``TableBatch``), so an entry
        purged after it was read stays purged."""
        prefix = keys.topic_prefix(metadata.topic, metadata.generation)
        start = keys.message_key(prefix, from_ms, 0)
        batch = TableBatch()
        count = 0
        for key, value in self.messages.store.scan(start, keys.stop_key_for_prefix(prefix)):
            ptr = decode_message_value(value).tx_write_pointer
            if ptr is not None and ptr > 0 and ptr in invalid:
                negated = negate_message_value(value)
                assert negated is not None
                batch.updates.append((MESSAGE_TABLE, key, negated))
                count += 1
                if len(batch) >= batch_rows:
                    # durable before any truncation may rely on it
                    self.write(batch)
                    batch = TableBatch()
        self.write(batch)
        return count

    def close(self) -> None:
        self.kv.close()
