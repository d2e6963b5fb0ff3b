"""The queue codecs (``tms.codec.queue``, ``tms.codec.queue_json``): golden bytes built
field by field, round trips, index keys that sort as the index means, and bad bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.codec import queue as qc
from tms.codec import queue_json as qj
from tms.codec.queue import QueueRow
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.model import TopicId
from tms.queues import (
    AckOutcome,
    Enqueued,
    EnqueueItem,
    QueueMessage,
    QueueState,
    QueueStats,
    Receipt,
    ReceiveResult,
)

PREFIX = b"ns:q:" + struct.pack(">i", 1)
ID = qc.queue_id(1_700_000_000_123, 7)
T = TopicId("ns", "q")


def test_message_row_golden_bytes() -> None:
    row = QueueRow(ID, QueueState.LEASED, 3, 2, 100, 200, 300, 0, 42, "k1", b"hi")
    expected = (
        bytes([3])  # state LEASED
        + struct.pack(">I", 3)  # priority
        + struct.pack(">I", 2)  # attempts
        + struct.pack(">q", 100)  # enqueued_ms
        + struct.pack(">q", 200)  # due_ms
        + struct.pack(">q", 300)  # lease_ms
        + struct.pack(">q", 0)  # done_ms
        + struct.pack(">q", 42)  # tx write pointer
        + bytes([2])
        + b"k1"
        + b"hi"
    )
    assert qc.encode_queue_row(row) == expected
    assert qc.decode_queue_row(ID, expected) == row
    assert struct.pack(">qH", 1_700_000_000_123, 7) == ID


def test_index_keys_golden_bytes() -> None:
    row = QueueRow(ID, QueueState.READY, 5, 0, 1, 99)
    assert qc.index_key(PREFIX, row) == PREFIX + b"r" + struct.pack(">Iq", 5, 99) + ID
    leased = QueueRow(ID, QueueState.LEASED, 5, 1, 1, 99, lease_ms=7)
    assert qc.index_key(PREFIX, leased) == PREFIX + b"l" + struct.pack(">q", 7) + ID
    pending_ack = QueueRow(ID, QueueState.LEASED, 5, 1, 1, 99, lease_ms=7, tx_write_pointer=9)
    assert qc.index_key(PREFIX, pending_ack) == PREFIX + b"w" + struct.pack(">q", 9) + ID
    for state, kind, field in (
        (QueueState.PENDING, b"p", 9),
        (QueueState.SCHEDULED, b"s", 99),
        (QueueState.DEAD, b"d", 11),
    ):
        r = QueueRow(ID, state, 5, 1, 1, 99, done_ms=11, tx_write_pointer=9)
        assert qc.index_key(PREFIX, r) == PREFIX + kind + struct.pack(">q", field) + ID
    acked = QueueRow(ID, QueueState.ACKED, 5, 1, 1, 99, done_ms=11)
    assert qc.index_key(PREFIX, acked) is None  # found by its id for purging
    assert qc.index_entry_id(qc.index_key(PREFIX, row) or b"") == ID
    assert qc.index_entry_time(qc.index_key(PREFIX, row) or b"") == 99
    assert qc.index_entry_priority(qc.index_key(PREFIX, row) or b"", len(PREFIX)) == 5


rows = st.builds(
    QueueRow,
    id=st.builds(qc.queue_id, st.integers(0, 2**62), st.integers(0, 0xFFFF)),
    state=st.sampled_from(QueueState),
    priority=st.integers(0, 2**31 - 1),
    attempts=st.integers(0, 2**31 - 1),
    enqueued_ms=st.integers(0, 2**62),
    due_ms=st.integers(0, 2**62),
    lease_ms=st.integers(0, 2**62),
    done_ms=st.integers(0, 2**62),
    tx_write_pointer=st.integers(0, 2**62),
    key=st.none() | st.text("abcXYZ-_.0189", min_size=1, max_size=200),
    payload=st.binary(max_size=64),
)


@given(rows)
def test_rows_round_trip(row: QueueRow) -> None:
    assert qc.decode_queue_row(row.id, qc.encode_queue_row(row)) == row


ready = st.tuples(
    st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 9)
)


@given(ready, ready)
def test_ready_keys_sort_by_priority_due_then_id(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    def key(t: tuple[int, ...]) -> bytes:
        row = QueueRow(qc.queue_id(t[2], t[3]), QueueState.READY, t[0], 0, 0, t[1])
        return qc.index_key(PREFIX, row) or b""

    assert (a < b) == (key(a) < key(b))


def test_bad_rows_and_counters_are_codec_errors() -> None:
    good = qc.encode_queue_row(QueueRow(ID, QueueState.READY, 0, 0, 0, 0, key="abc"))
    with pytest.raises(TmsCodecError):
        qc.decode_queue_row(ID, good[:10])
    with pytest.raises(TmsCodecError):
        qc.decode_queue_row(ID, good[:-2])  # the key cut short
    with pytest.raises(TmsCodecError):
        qc.decode_queue_row(ID, bytes([9]) + good[1:])
    assert qc.decode_counters(qc.encode_counters((1, 2, 3, 4, 5, 6))) == (1, 2, 3, 4, 5, 6)
    assert qc.decode_counters(None) == (0,) * 6
    with pytest.raises(TmsCodecError):
        qc.decode_counters(b"\x00" * 7)


def test_json_round_trips() -> None:
    items = [EnqueueItem(b"\x00a", key="k", priority=2), EnqueueItem(b"b", delay_ms=5, at_ms=None)]
    request = qj.decode_enqueue_request(T, qj.encode_enqueue_request(items, 17))
    assert list(request.items) == items and request.tx_write_pointer == 17
    results = [Enqueued(ID, True), Enqueued(ID)]
    assert qj.decode_enqueue_response(qj.encode_enqueue_response(results)) == results
    message = QueueMessage(ID, b"\xffx", 3, 1, 2, 4, 5, None)
    received = ReceiveResult((message,), 99)
    assert qj.decode_receive_response(qj.encode_receive_response(received)) == received
    receipts = [Receipt(ID, 3)]
    ack = qj.decode_ack_request(T, qj.encode_ack_request(receipts, None))
    assert list(ack.receipts) == receipts and ack.tx_write_pointer is None
    nack = qj.decode_nack_request(T, qj.encode_nack_request(receipts, 0))
    assert nack.delay_ms == 0
    outcomes = [AckOutcome.ACKED, AckOutcome.LEASE_LOST]
    assert qj.decode_outcomes(qj.encode_outcomes(outcomes)) == outcomes
    stats = QueueStats(1, 2, 3, 4, 5, 6, None)
    assert qj.decode_queue_stats(qj.encode_queue_stats(stats)) == stats
    settle = qj.decode_settle_request(T, qj.encode_settle_request(5, True))
    assert (settle.tx_write_pointer, settle.commit) == (5, True)


@pytest.mark.parametrize(
    "body",
    [
        b'{"messages": [{"payload": "AA==", "delayMs": -1}]}',
        b'{"messages": [{"payload": "AA==", "key": "has space"}]}',
        b'{"messages": [{"payload": "AA==", "priority": true}]}',
        b'{"messages": "x"}',
        b'{"transactionWritePointer": "5", "messages": [{"payload": "AA=="}]}',
    ],
)
def test_bad_enqueue_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(TmsInvalidArgumentError):
        qj.decode_enqueue_request(T, body)
