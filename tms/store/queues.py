"""``QueueTables``: the rows of queue topics (``tms.queues``) over the key-value contract.

Four tables, each keyed from the topic prefix (topic, generation) like the message table
(bytes in ``tms.codec.queue``):

* ``q`` — one row per message: its state, schedule, attempts, lease, key and payload;
* ``qi`` — one index entry per message not acked, a function of its row: pending by
  transaction, scheduled by due time, ready by (priority, due time), leased by lease
  expiry, ack-pending by transaction, dead by when — so every question the writer asks
  (what is due, whose lease ran out, what dead message to purge) is a range scan, and
  nothing about the messages is held in memory; acked messages are found for purging
  by their ids (which start with the enqueue time) in ``q``;
* ``qk`` — application key -> message id (idempotent enqueue), and one *lease record*
  per receive still within its lease (``tms.queue_leases``);
* ``qc`` — one counter row per queue: messages per state, kept by the writer in the
  same atomic write as the changes it counts.

Changes are described in a ``TableBatch`` (``put_row`` and friends) and written with the
rest of the topic writer's batch; reads are plain gets and bounded scans. Nothing here
is LevelDB-specific: any engine of ``tms.store.kv`` holds queues.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping
from typing import TYPE_CHECKING

from tms.codec import keys
from tms.codec import queue as qc
from tms.codec.queue import QueueRow
from tms.store.kv import KeyValueStore

if TYPE_CHECKING:  # tms.store.tables builds a QueueTables
    from tms.store.tables import TableBatch

__all__ = ["COUNTER_TABLE", "INDEX_TABLE", "KEY_TABLE", "QUEUE_TABLE", "QueueTables"]

QUEUE_TABLE = b"q"
INDEX_TABLE = b"qi"
KEY_TABLE = b"qk"
COUNTER_TABLE = b"qc"


class QueueTables:
    """See the module docstring. Thread-safe as the store is."""

    def __init__(self, store: KeyValueStore) -> None:
        self.rows = store.table(QUEUE_TABLE)
        self.index = store.table(INDEX_TABLE)
        self.keys = store.table(KEY_TABLE)
        self.counter_rows = store.table(COUNTER_TABLE)

    # -- reads --------------------------------------------------------------------------

    def get(self, prefix: bytes, message_id: bytes) -> QueueRow | None:
        value = self.rows.get(prefix + message_id)
        return qc.decode_queue_row(message_id, value) if value is not None else None

    def id_of_key(self, prefix: bytes, key: str) -> bytes | None:
        return self.keys.get(prefix + key.encode("ascii"))

    def id_of_origin(self, prefix: bytes, origin: bytes) -> bytes | None:
        """The id a dead letter from ``origin`` (source prefix and id) got here."""
        return self.keys.get(prefix + b"\x00" + origin)

    def destination(self, prefix: bytes, message_id: bytes) -> str | None:
        """The dead-letter queue (a topic name of the namespace) a MOVING message was
        sent to when it died; None for a message made MOVING before destinations were
        kept (it goes where the queue's property says now)."""
        name = self.keys.get(prefix + b"\x01" + message_id)
        return name.decode("ascii") if name is not None else None

    def counters(self, prefix: bytes) -> tuple[int, ...]:
        """Messages per ``QueueState`` (as of the last write)."""
        return qc.decode_counters(self.counter_rows.get(prefix))

    def last_position(self, prefix: bytes) -> tuple[int, int] | None:
        """(ms, seq) of the newest message id of a queue generation."""
        for key, _value in self.rows.scan(prefix, keys.stop_key_for_prefix(prefix), reverse=True):
            return keys.decode_position(key)
        return None

    def entries(
        self, prefix: bytes, kind: bytes, *, start: bytes = b"", stop: bytes | None = None
    ) -> Iterator[bytes]:
        """Index keys of one kind (``tms.codec.queue.INDEX_KINDS``), ascending, from the
        fields ``start`` (packed) up to, excluding, ``stop`` (packed; None: all)."""
        base = prefix + kind
        stop_key = base + stop if stop is not None else keys.stop_key_for_prefix(base)
        return self.index_keys(base + start, stop_key)

    def index_keys(self, start: bytes, stop: bytes | None) -> Iterator[bytes]:
        """Index keys from ``start`` up to, excluding, ``stop`` (whole keys)."""
        for key, _value in self.index.scan(start, stop):
            yield key

    def scan_rows(
        self, prefix: bytes, start: bytes = b"", stop: bytes | None = None
    ) -> Iterator[QueueRow]:
        """Every message of a queue generation from id ``start`` (up to, excluding, id
        ``stop``; None: to the end), in id order."""
        n = len(prefix)
        end = prefix + stop if stop is not None else keys.stop_key_for_prefix(prefix)
        for key, value in self.rows.scan(prefix + start, end):
            yield qc.decode_queue_row(key[n:], value)

    def pending_pointers(self, prefix: bytes, limit: int) -> set[int]:
        """Write pointers with pending enqueues or acks in a queue (from the oldest, at
        most ``limit`` index entries looked at per kind)."""
        pointers: set[int] = set()
        for kind in (b"p", b"w"):
            for n, key in enumerate(self.entries(prefix, kind)):
                if n >= limit:
                    break
                pointers.add(qc.index_entry_time(key))
        return pointers

    def first_ready_due(self, prefix: bytes, leased: Container[bytes] = ()) -> int | None:
        """The earliest due time among ready messages but the ``leased`` ones (leased in
        memory: their ready entries stay, ``tms.queue_leases``): one seek per priority
        present, stepping over leased entries."""
        base = prefix + b"r"
        stop = keys.stop_key_for_prefix(base)
        start = base
        n = len(prefix)
        oldest: int | None = None
        while True:
            key = next(
                (k for k, _v in self.index.scan(start, stop) if qc.index_entry_id(k) not in leased),
                None,
            )
            if key is None:
                return oldest
            due = qc.index_entry_time(key)
            oldest = due if oldest is None else min(oldest, due)
            priority = qc.index_entry_priority(key, n)
            if priority >= 0xFFFFFFFF:
                return oldest
            start = base + (priority + 1).to_bytes(4, "big")

    # -- writes (added to a batch) --------------------------------------------------------

    @staticmethod
    def put_row(batch: TableBatch, prefix: bytes, old: QueueRow | None, new: QueueRow) -> None:
        """Replace ``old`` (None: a new message) by ``new``, index entry included."""
        before = (qc.index_key(prefix, old) or b"") if old is not None else None
        QueueTables.write_rows(batch, prefix, {new.id: new}, {new.id: before})

    @staticmethod
    def write_rows(
        batch: TableBatch,
        prefix: bytes,
        rows: Mapping[bytes, QueueRow | None],
        before: Mapping[bytes, bytes | None],
    ) -> dict[bytes, bytes]:
        """Messages' one change each in a batch: from what the store holds —
        ``before[id]``, its index entry (b"": stored without one, as acked messages are;
        None: not stored) — to ``rows[id]`` (None: removed), each written as one row
        write (or delete) and the index entries that differ. Per index kind, the least
        entry put (a hot path: one loop)."""
        ops = batch.ops
        append = ops.append
        index_key, encode = qc.index_key, qc.encode_queue_row
        start = len(prefix)
        least: dict[bytes, bytes] = {}
        for message_id, row in rows.items():
            old = before[message_id]
            index = index_key(prefix, row) if row is not None else None
            if old and old != index:
                append((INDEX_TABLE, old, None))
            if row is None:
                if old is not None:
                    append((QUEUE_TABLE, prefix + message_id, None))
                continue
            if index is not None and index != old:
                append((INDEX_TABLE, index, b""))
                kind = index[start : start + 1]
                if index < least.get(kind, index + b"\x00"):
                    least[kind] = index
            append((QUEUE_TABLE, prefix + message_id, encode(row)))
        return least

    @staticmethod
    def delete_key(batch: TableBatch, prefix: bytes, key: str) -> None:
        batch.ops.append((KEY_TABLE, prefix + key.encode("ascii"), None))

    @staticmethod
    def delete_index_entry(batch: TableBatch, index: bytes) -> None:
        """An index entry without its row (one of the acked entries earlier versions wrote)."""
        batch.ops.append((INDEX_TABLE, index, None))

    @staticmethod
    def put_key(batch: TableBatch, prefix: bytes, key: str, message_id: bytes) -> None:
        batch.ops.append((KEY_TABLE, prefix + key.encode("ascii"), message_id))

    @staticmethod
    def put_origin(batch: TableBatch, prefix: bytes, origin: bytes, message_id: bytes) -> None:
        """The origin row of a dead letter copied here, and its reverse (to remove both
        with the copy)."""
        batch.ops.append((KEY_TABLE, prefix + b"\x00" + origin, message_id))
        batch.ops.append((KEY_TABLE, prefix + b"\x02" + message_id, origin))

    @staticmethod
    def delete_origin(batch: TableBatch, prefix: bytes, origin: bytes, message_id: bytes) -> None:
        batch.ops.append((KEY_TABLE, prefix + b"\x00" + origin, None))
        batch.ops.append((KEY_TABLE, prefix + b"\x02" + message_id, None))

    def origin_of(self, prefix: bytes, message_id: bytes) -> bytes | None:
        """The origin (source prefix and id) of a dead letter copied here as
        ``message_id``; None for any other message (or a copy made before origins were
        kept both ways)."""
        return self.keys.get(prefix + b"\x02" + message_id)

    def has_copies(self, prefix: bytes) -> bool:
        """Whether the queue holds any dead letter copied in (one seek)."""
        base = prefix + b"\x02"
        return any(True for _ in self.keys.scan(base, keys.stop_key_for_prefix(base)))

    def source_exists(self, origin: bytes) -> bool:
        """Whether the original of a dead letter (``origin``: its queue's prefix and its
        id) is still in its queue: its move is not finished."""
        return self.rows.get(origin) is not None

    def lease_records(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, packed entries) of every lease record of a queue (``tms.queue_leases``),
        earliest deadline first."""
        base = prefix + qc.LEASE_RECORDS
        return self.keys.scan(base, keys.stop_key_for_prefix(base))

    @staticmethod
    def put_lease_record(batch: TableBatch, key: bytes, entries: bytes) -> None:
        batch.ops.append((KEY_TABLE, key, entries))

    @staticmethod
    def delete_lease_record(batch: TableBatch, key: bytes) -> None:
        batch.ops.append((KEY_TABLE, key, None))

    @staticmethod
    def put_destination(batch: TableBatch, prefix: bytes, message_id: bytes, name: str) -> None:
        batch.ops.append((KEY_TABLE, prefix + b"\x01" + message_id, name.encode("ascii")))

    @staticmethod
    def delete_destination(batch: TableBatch, prefix: bytes, message_id: bytes) -> None:
        batch.ops.append((KEY_TABLE, prefix + b"\x01" + message_id, None))

    def moving(
        self, prefix: bytes, limit: int, after: bytes = b""
    ) -> list[tuple[bytes, QueueRow, str | None]]:
        """Up to ``limit`` MOVING messages (dead letters on their way), oldest first, from
        after the index entry ``after`` (b"": the first): each with its index entry (to
        go on from) and its ``destination``."""
        base = prefix + b"m"
        start = after + b"\x00" if after else base
        found = []
        for key in self.index_keys(start, keys.stop_key_for_prefix(base)):
            message_id = qc.index_entry_id(key)
            row = self.get(prefix, message_id)
            if row is not None:
                found.append((key, row, self.destination(prefix, message_id)))
                if len(found) >= limit:
                    break
        return found

    @staticmethod
    def put_counters(batch: TableBatch, prefix: bytes, counts: tuple[int, ...]) -> None:
        batch.ops.append((COUNTER_TABLE, prefix, qc.encode_counters(counts)))

    # -- maintenance ----------------------------------------------------------------------

    def old_generation_rows(
        self, name_prefix: bytes, older: Callable[[int], bool]
    ) -> Iterator[tuple[bytes, bytes]]:
        """(table, key) of every row of the topic whose generation is ``older``."""
        n = len(name_prefix)
        stop = keys.stop_key_for_prefix(name_prefix)
        for table_name, table in (
            (QUEUE_TABLE, self.rows),
            (INDEX_TABLE, self.index),
            (KEY_TABLE, self.keys),
            (COUNTER_TABLE, self.counter_rows),
        ):
            for key, _value in table.scan(name_prefix, stop):
                if older(keys.generation_of(key, n)):
                    yield table_name, key
