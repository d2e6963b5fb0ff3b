"""The message, payload, metadata and idempotency tables, built once on any
``KeyValueStore``.

* ``MessageTable``: rows keyed (topic, generation, publish_ms, seq); values carry the
  optional transaction write pointer and the optional payload (``tms.codec.values``).
* ``PayloadTable``: rows keyed (topic, generation, write pointer, write_ms, seq), written
  ahead of a transaction's commit marker.
* ``MetadataTable``: one row per topic; the generation lifecycle of the design.
* ``IdempotencyTable``: rows keyed (topic, generation, key) holding the outcome of a
  keyed ``MarkersRequest``; they expire with the topic's TTL.
* ``PositionTable`` (``tms.positions``): subscriptions' positions written under a
  transaction's write pointer, keyed (topic, generation, subscription, write pointer).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tms.codec import keys
from tms.codec.values import (
    MessageEntry,
    decode_idempotency_value,
    decode_message_value,
    decode_metadata,
    decode_payload_value,
    encode_idempotency_value,
    encode_message_value,
    encode_metadata,
    encode_payload_value,
    negate_message_value,
)
from tms.errors import TopicAlreadyExistsError, TopicNotFoundError
from tms.model import RollbackDetail, TopicId, TopicMetadata
from tms.positions import POSITION_TABLE, PositionTable
from tms.store.kv import KeyValueStore, TableStore, WriteOp

__all__ = [
    "IDEMPOTENCY_TABLE",
    "MESSAGE_TABLE",
    "METADATA_TABLE",
    "PAYLOAD_TABLE",
    "IdempotencyTable",
    "MessageRow",
    "MessageTable",
    "MetadataTable",
    "PayloadRow",
    "PayloadTable",
    "Tables",
]

MESSAGE_TABLE = b"m"
PAYLOAD_TABLE = b"p"
METADATA_TABLE = b"t"
IDEMPOTENCY_TABLE = b"k"


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


class MessageTable:
    def __init__(self, store: TableStore) -> None:
        self.store = store

    def write(self, prefix: bytes, rows: Sequence[MessageRow]) -> None:
        """Write ``rows`` of one topic generation atomically and durably."""
        self.store.write([(k, v) for _t, k, v in self.ops(prefix, rows) if v is not None])

    @staticmethod
    def ops(prefix: bytes, rows: Sequence[MessageRow]) -> list[WriteOp]:
        return [
            (
                MESSAGE_TABLE,
                keys.message_key(prefix, r.publish_ms, r.seq),
                encode_message_value(r.entry),
            )
            for r in rows
        ]

    def get(self, prefix: bytes, publish_ms: int, seq: int) -> MessageEntry | None:
        value = self.store.get(keys.message_key(prefix, publish_ms, seq))
        return decode_message_value(value) if value is not None else None

    def rows(self, prefix: bytes, start: tuple[int, int] = (0, 0)) -> Iterator[tuple[bytes, bytes]]:
        """Raw (key, value) rows from (publish_ms, seq) ``start`` to the end of the topic
        generation (the fetcher decodes them inline)."""
        return self.store.scan(keys.message_key(prefix, *start), keys.stop_key_for_prefix(prefix))

    def scan(self, prefix: bytes, start: tuple[int, int] = (0, 0)) -> Iterator[MessageRow]:
        """Decoded rows from (publish_ms, seq) ``start`` to the end of the topic generation."""
        for key, value in self.rows(prefix, start):
            _gen, publish_ms, seq = keys.decode_message_key(key)
            yield MessageRow(publish_ms, seq, decode_message_value(value))

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

    def rollback(self, prefix: bytes, detail: RollbackDetail) -> int:
        """Roll back ``detail`` now; return how many entries were negated."""
        ops = self.rollback_ops(prefix, detail)
        if ops:
            self.store.write([(k, v) for _t, k, v in ops if v is not None])
        return len(ops)

    def rollback_ops(self, prefix: bytes, detail: RollbackDetail) -> list[WriteOp]:
        """Negate the write pointer of every entry of ``detail``'s range written by its
        transaction. Entries of other writers in the range (there should be none) and
        entries already negated are left alone."""
        start = keys.message_key(prefix, detail.start_ms, detail.start_seq)
        stop = keys.stop_key_for_prefix(keys.message_key(prefix, detail.end_ms, detail.end_seq))
        ops: list[WriteOp] = []
        for key, value in self.store.scan(start, stop):
            if decode_message_value(value).tx_write_pointer == detail.tx_write_pointer:
                negated = negate_message_value(value)
                if negated is not None:
                    ops.append((MESSAGE_TABLE, key, negated))
        return ops


SEAL_POSITION = (2**63 - 1, 0xFFFF)
_SEAL = struct.Struct(">qH")


class PayloadTable:
    """Payload rows, plus one *seal* row per write pointer whose commit marker was
    published: it sits after every payload row of the write pointer (at the largest
    position) and holds the marker's (publish_ms, seq)."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def write(self, prefix: bytes, rows: Sequence[PayloadRow]) -> None:
        self.store.write([(k, v) for _t, k, v in self.ops(prefix, rows) if v is not None])

    @staticmethod
    def ops(prefix: bytes, rows: Sequence[PayloadRow]) -> list[WriteOp]:
        return [
            (
                PAYLOAD_TABLE,
                keys.payload_key(prefix, r.tx_write_pointer, r.write_ms, r.p_seq),
                encode_payload_value(r.payload, r.ttl_s),
            )
            for r in rows
        ]

    @staticmethod
    def seal_op(prefix: bytes, tx_write_pointer: int, marker: tuple[int, int]) -> WriteOp:
        key = keys.payload_key(prefix, tx_write_pointer, *SEAL_POSITION)
        return PAYLOAD_TABLE, key, b"\x01" + _SEAL.pack(*marker)

    def seal_of(self, prefix: bytes, tx_write_pointer: int) -> tuple[int, int] | None:
        """The (publish_ms, seq) of the commit marker that sealed ``tx_write_pointer``."""
        value = self.store.get(keys.payload_key(prefix, tx_write_pointer, *SEAL_POSITION))
        if value is None:
            return None
        ms, seq = _SEAL.unpack_from(value, 1)
        return int(ms), int(seq)

    def rows(
        self, prefix: bytes, tx_write_pointer: int, start: tuple[int, int] = (0, 0)
    ) -> Iterator[tuple[bytes, bytes]]:
        """Raw (key, value) payload rows of one write pointer from (write_ms, p_seq)
        ``start``, the seal row excluded."""
        return self.store.scan(
            keys.payload_key(prefix, tx_write_pointer, *start),
            keys.payload_key(prefix, tx_write_pointer, *SEAL_POSITION),
        )

    def scan(
        self,
        prefix: bytes,
        tx_write_pointer: int,
        start: tuple[int, int] = (0, 0),
        *,
        inclusive: bool = True,
    ) -> Iterator[PayloadRow]:
        """Decoded rows of one write pointer from (write_ms, p_seq) ``start``; with
        ``inclusive=False`` a row exactly at ``start`` is skipped."""
        start_key = keys.payload_key(prefix, tx_write_pointer, *start)
        for key, value in self.rows(prefix, tx_write_pointer, start):
            if not inclusive and key == start_key:
                continue
            _gen, wp, write_ms, p_seq = keys.decode_payload_key(key)
            payload, ttl = decode_payload_value(value)
            yield PayloadRow(wp, write_ms, p_seq, payload, ttl)

    def last_position(self, prefix: bytes, tx_write_pointer: int) -> tuple[int, int] | None:
        wp_prefix = keys.payload_prefix(prefix, tx_write_pointer)
        for key, _value in self.store.scan(
            wp_prefix, keys.stop_key_for_prefix(wp_prefix), reverse=True
        ):
            _gen, _wp, write_ms, p_seq = keys.decode_payload_key(key)
            return write_ms, p_seq
        return None


class MetadataTable:
    """Topic metadata with the design's generation lifecycle; thread-safe."""

    def __init__(self, store: TableStore) -> None:
        self.store = store
        self._lock = threading.Lock()

    def _read(self, topic: TopicId) -> TopicMetadata | None:
        value = self.store.get(keys.metadata_key(topic))
        if value is None:
            return None
        return TopicMetadata(topic, decode_metadata(value))

    def _put(self, metadata: TopicMetadata, epoch: int) -> None:
        """Write a row computed from a read at ``epoch`` (refused if the store recovered
        since: the read may be stale)."""
        self.store.write(
            [(keys.metadata_key(metadata.topic), encode_metadata(metadata.properties))],
            epoch=epoch,
        )

    def create(self, topic: TopicId, properties: dict[str, str]) -> TopicMetadata:
        """Create (generation 1, or one above a deleted topic's); 409 if it exists."""
        with self._lock:
            epoch = self.store.epoch
            current = self._read(topic)
            generation = 1
            if current is not None:
                if current.exists:
                    raise TopicAlreadyExistsError(topic)
                generation = -current.generation + 1
            metadata = TopicMetadata(topic, {**properties, "generation": str(generation)})
            self._put(metadata, epoch)
            return metadata

    def update(self, topic: TopicId, properties: dict[str, str]) -> TopicMetadata:
        """Replace every property, keeping the generation; 404 if absent or deleted."""
        with self._lock:
            epoch = self.store.epoch
            current = self._read(topic)
            if current is None or not current.exists:
                raise TopicNotFoundError(topic)
            metadata = TopicMetadata(topic, {**properties, "generation": str(current.generation)})
            self._put(metadata, epoch)
            return metadata

    def delete(self, topic: TopicId) -> TopicMetadata:
        """Negate the generation (other properties stay, for cleanup); 404 if absent."""
        with self._lock:
            epoch = self.store.epoch
            current = self._read(topic)
            if current is None or not current.exists:
                raise TopicNotFoundError(topic)
            deleted = current.with_generation(-current.generation)
            self._put(deleted, epoch)
            return deleted

    def get_any(self, topic: TopicId) -> TopicMetadata:
        """The topic's row, deleted or not; 404 if it never existed."""
        current = self._read(topic)
        if current is None:
            raise TopicNotFoundError(topic)
        return current

    def get(self, topic: TopicId) -> TopicMetadata:
        current = self._read(topic)
        if current is None or not current.exists:
            raise TopicNotFoundError(topic)
        return current

    def list_topics(self, namespace: str) -> list[TopicId]:
        """Existing topics of a namespace, in key order."""
        prefix = keys.namespace_prefix(namespace)
        return [m.topic for m in self._scan(prefix) if m.exists]

    def scan_all(self) -> list[TopicMetadata]:
        """Every topic row, deleted ones included (cleanup)."""
        return list(self._scan(b""))

    def _scan(self, prefix: bytes) -> Iterator[TopicMetadata]:
        for key, value in self.store.scan(
            prefix, keys.stop_key_for_prefix(prefix) if prefix else None
        ):
            yield TopicMetadata(keys.topic_id_from_metadata_key(key), decode_metadata(value))


class IdempotencyTable:
    """Outcomes of keyed marker requests (see ``tms.model.MarkersRequest``)."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def get(self, prefix: bytes, key: str) -> tuple[int, tuple[RollbackDetail, ...]] | None:
        """(write_ms, rollback ranges) recorded under ``key``, or None."""
        value = self.store.get(keys.idempotency_key(prefix, key))
        return decode_idempotency_value(value) if value is not None else None

    @staticmethod
    def op(prefix: bytes, key: str, write_ms: int, details: Sequence[RollbackDetail]) -> WriteOp:
        return (
            IDEMPOTENCY_TABLE,
            keys.idempotency_key(prefix, key),
            encode_idempotency_value(write_ms, details),
        )


class Tables:
    """The tables of one store."""

    def __init__(self, store: KeyValueStore) -> None:
        self.kv = store
        self.messages = MessageTable(store.table(MESSAGE_TABLE))
        self.payloads = PayloadTable(store.table(PAYLOAD_TABLE))
        self.metadata = MetadataTable(store.table(METADATA_TABLE))
        self.idempotency = IdempotencyTable(store.table(IDEMPOTENCY_TABLE))
        self.positions = PositionTable(store.table(POSITION_TABLE))

    def topic_bytes(self, prefix: bytes) -> int:
        """Approximately how many bytes a topic generation takes (both tables)."""
        stop = keys.stop_key_for_prefix(prefix)
        return self.messages.store.approximate_size(
            prefix, stop
        ) + self.payloads.store.approximate_size(prefix, stop)

    def close(self) -> None:
        self.kv.close()
