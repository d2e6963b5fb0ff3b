"""``RowCache``: bounded by rows and payload bytes, oldest written first out; large
payloads and removed rows are not kept; only a delivery's own lease is answered."""

from __future__ import annotations

from tms.codec.queue import QueueRow, queue_id
from tms.queue_rows import MAX_BYTES, MAX_PAYLOAD, MAX_ROWS, RowCache
from tms.queues import QueueState, Receipt


def row(n: int, payload: bytes = b"p", state: QueueState = QueueState.READY) -> QueueRow:
    return QueueRow(queue_id(1, n), state, 0, 1, 1, 1, payload=payload)


def test_the_cache_keeps_the_newest_rows_within_its_bounds() -> None:
    cache = RowCache()
    cache.update({r.id: r for r in (row(n) for n in range(MAX_ROWS + 10))})
    assert len(cache) == MAX_ROWS
    assert cache.get(queue_id(1, 9)) is None and cache.get(queue_id(1, 10)) is not None
    big = MAX_PAYLOAD // 2
    cache.update({r.id: r for r in (row(n, bytes(big)) for n in range(MAX_BYTES // big + 5))})
    assert sum(len(r.payload) for r in cache._rows.values()) <= MAX_BYTES
    too_big = row(1, bytes(MAX_PAYLOAD + 1))
    cache.update({too_big.id: too_big, queue_id(1, 2): None})
    assert cache.get(too_big.id) is None and cache.get(queue_id(1, 2)) is None
    cache.clear()
    assert len(cache) == 0 and cache.counts is None


def test_only_the_current_lease_of_a_delivery_is_answered_from_the_cache() -> None:
    cache = RowCache()
    leased = row(7, state=QueueState.LEASED)
    cache.update({leased.id: leased})
    assert cache.lease_of(Receipt(leased.id, 1)) is leased
    assert cache.lease_of(Receipt(leased.id, 2)) is None  # another attempt: the store
    ready = row(8)
    cache.update({ready.id: ready})
    assert cache.lease_of(Receipt(ready.id, 1)) is None
