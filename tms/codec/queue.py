"""Rows of the queue tables (pure): a message row, its index entry, key and counter rows.

::

    message row key  := topic prefix || id(10)              id = enqueue_ms(8) seq(2)
    message value    := state(1) priority(4) attempts(4) enqueued_ms(8) due_ms(8)
                        lease_ms(8) done_ms(8) tx_ptr(8) key_len(1) key payload
    index key        := topic prefix || kind(1) || fields || id(10)
        'p' tx_ptr(8)             PENDING: enqueued by a transaction not yet settled
        's' due_ms(8)             SCHEDULED
        'r' priority(4) due_ms(8) READY, in delivery order
        'l' lease_ms(8)           LEASED, by lease expiry
        'w' tx_ptr(8)             LEASED with a transactional ack pending
        'a' done_ms(8)            ACKED, by when: written by earlier versions only (an
                                  acked message has no entry now; purge removes these)
        'd' done_ms(8)            DEAD, by when
        'm' done_ms(8)            MOVING (dead, on its way to the dead-letter queue)
    index value      := empty
    key row          := topic prefix || ASCII(key) -> id(10)
    origin row       := topic prefix || 0x00 || origin -> id(10)    (in the key table;
                        origin: the source queue's prefix and id of a dead letter moved
                        here, so a move repeated after a crash is not a second copy)
    copy row         := topic prefix || 0x02 || id(10) -> origin   (in the key table,
                        beside each origin row: removed with it and the copy once the
                        copy is purged and its original is gone from its queue)
    destination row  := topic prefix || 0x01 || id(10) -> ASCII(queue name)  (in the key
                        table, beside a MOVING message: the dead-letter queue it goes to,
                        named when it died; removed with the message)
    counter row      := topic prefix -> six int64 counts, by state (``QueueState`` order;
                        MOVING counted as DEAD)

Big-endian throughout, so each index kind sorts by its fields, then id. Every message
but an acked one has exactly one index entry, a function of its row (``index_key``); an
acked message has none (it is found for purging by its id, which starts with its enqueue
time). A state change is the old entry deleted, the new one put and the row rewritten,
in one atomic write; the changes of one message within a writer batch are written as
one (``tms.queue_batch``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tms.errors import TmsCodecError
from tms.queues import QUEUE_ID_SIZE, QueueMessage, QueueState

__all__ = [
    "INDEX_KINDS",
    "QueueRow",
    "decode_counters",
    "decode_queue_row",
    "encode_counters",
    "encode_queue_row",
    "index_key",
    "index_kind_prefix",
    "lease_record_key",
    "queue_id",
]

_HEAD = struct.Struct(">BIIqqqqqB")
_ID = struct.Struct(">qH")
_Q = struct.Struct(">q")
_PRIO_DUE = struct.Struct(">Iq")
_COUNTERS = struct.Struct(">6q")
_READY, _LEASED, _ACKED = QueueState.READY, QueueState.LEASED, QueueState.ACKED  # hot

INDEX_KINDS = {
    "pending": b"p",
    "scheduled": b"s",
    "ready": b"r",
    "leased": b"l",
    "ack_pending": b"w",
    "acked": b"a",
    "dead": b"d",
    "moving": b"m",
}


def queue_id(ms: int, seq: int) -> bytes:
    """The id of the message enqueued at (ms, seq)."""
    return _ID.pack(ms, seq)


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A message and its state. ``lease_ms``: when the current lease expires (LEASED);
    ``done_ms``: when it was acked or dead-lettered; ``tx_write_pointer``: the enqueue's
    transaction (PENDING) or a pending ack's (LEASED), else 0."""

    id: bytes
    state: QueueState
    priority: int
    attempts: int
    enqueued_ms: int
    due_ms: int
    lease_ms: int = 0
    done_ms: int = 0
    tx_write_pointer: int = 0
    key: str | None = None
    payload: bytes = b""

    def message(self) -> QueueMessage:
        return QueueMessage(
            self.id,
            self.payload,
            self.attempts,
            self.enqueued_ms,
            self.due_ms,
            self.priority,
            self.lease_ms,
            self.key,
        )


def encode_queue_row(row: QueueRow) -> bytes:
    key = row.key.encode("ascii") if row.key is not None else b""
    head = _HEAD.pack(
        row.state,
        row.priority,
        row.attempts,
        row.enqueued_ms,
        row.due_ms,
        row.lease_ms,
        row.done_ms,
        row.tx_write_pointer,
        len(key),
    )
    return head + key + row.payload


def decode_queue_row(message_id: bytes, value: bytes) -> QueueRow:
    """The row of message ``message_id`` stored as ``value``."""
    if len(value) < _HEAD.size:
        raise TmsCodecError(f"queue row too short: {len(value)} bytes")
    state, priority, attempts, enqueued, due, lease, done, wp, key_len = _HEAD.unpack_from(value)
    end = _HEAD.size + key_len
    if len(value) < end:
        raise TmsCodecError("queue row key cut short")
    try:
        queue_state = QueueState(state)
    except ValueError as exc:
        raise TmsCodecError(f"unknown queue message state {state}") from exc
    key = value[_HEAD.size : end].decode("ascii") if key_len else None
    return QueueRow(
        message_id, queue_state, priority, attempts, enqueued, due, lease, done, wp, key,
        value[end:],
    )  # fmt: skip


def index_key(prefix: bytes, row: QueueRow) -> bytes | None:
    """The row's one index entry (see the module docstring); None for an acked row."""
    state = row.state
    if state is _READY:
        return prefix + b"r" + _PRIO_DUE.pack(row.priority, row.due_ms) + row.id
    if state is _LEASED:
        if row.tx_write_pointer:
            return prefix + b"w" + _Q.pack(row.tx_write_pointer) + row.id
        return prefix + b"l" + _Q.pack(row.lease_ms) + row.id
    if state is _ACKED:
        return None
    if state is QueueState.SCHEDULED:
        return prefix + b"s" + _Q.pack(row.due_ms) + row.id
    if state is QueueState.PENDING:
        return prefix + b"p" + _Q.pack(row.tx_write_pointer) + row.id
    if state is QueueState.MOVING:
        return prefix + b"m" + _Q.pack(row.done_ms) + row.id
    return prefix + b"d" + _Q.pack(row.done_ms) + row.id


def index_kind_prefix(prefix: bytes, kind: bytes, *fields: int) -> bytes:
    """The start of an index kind's entries (with leading int64 ``fields``: of those)."""
    return prefix + kind + b"".join(_Q.pack(f) for f in fields)


def index_entry_id(key: bytes) -> bytes:
    """The message id an index entry points to."""
    return key[-QUEUE_ID_SIZE:]


def index_entry_time(key: bytes) -> int:
    """The int64 just before the id: due_ms ('s', 'r'), lease_ms ('l'), tx_ptr ('p',
    'w'), done_ms ('a', 'd', 'm')."""
    (value,) = _Q.unpack_from(key, len(key) - QUEUE_ID_SIZE - 8)
    return int(value)


def index_entry_priority(key: bytes, prefix_len: int) -> int:
    """The priority of a ready entry."""
    (priority,) = struct.unpack_from(">I", key, prefix_len + 1)
    return int(priority)


def encode_counters(counts: tuple[int, ...]) -> bytes:
    return _COUNTERS.pack(*counts)


def decode_counters(value: bytes | None) -> tuple[int, ...]:
    if value is None:
        return (0,) * 6
    if len(value) != _COUNTERS.size:
        raise TmsCodecError("queue counter row of the wrong size")
    return _COUNTERS.unpack(value)


# -- lease records (tms.queue_leases) -----------------------------------------------------

LEASE_RECORDS = b"\x03"  # their keys in the key table: prefix, this, deadline, first entry
_ENTRY = struct.Struct(">10sI")


def lease_record_key(prefix: bytes, deadline_ms: int, first: bytes, attempt: int) -> bytes:
    """The key of one receive's lease record: its deadline first (so the records whose
    leases ran out are a range), then its first message id and attempt (unique: one
    delivery is leased once)."""
    return prefix + LEASE_RECORDS + _Q.pack(deadline_ms) + _ENTRY.pack(first, attempt)


def lease_record_deadline(key: bytes, prefix_len: int) -> int:
    """The deadline of the leases of the record ``key``."""
    (deadline,) = _Q.unpack_from(key, prefix_len + 1)
    return int(deadline)


def encode_lease_entries(entries: list[tuple[bytes, int]]) -> bytes:
    """(message id, attempt) of each message one receive leased, packed."""
    pack = _ENTRY.pack
    return b"".join([pack(message_id, attempt) for message_id, attempt in entries])


def decode_lease_entries(value: bytes) -> list[tuple[bytes, int]]:
    if len(value) % _ENTRY.size:
        raise TmsCodecError("lease record of the wrong size")
    return [(bytes(i), int(a)) for i, a in _ENTRY.iter_unpack(value)]
