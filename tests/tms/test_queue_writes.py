"""What a queue writer batch writes (``tms.queue_batch``): each message it changes once,
in its final state — one row write, and index entries only where the final entry
differs from the stored one; acked messages keep no index entry and are purged by id.
A failed operation inside a batch takes back exactly its own changes, also of a message
an earlier operation of the batch changed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeClock
from tests.tms.queue_store import Q, QueueStore, one_batch, prefix_of, recount
from tms import queue_purge
from tms.codec import keys
from tms.codec import queue as qc
from tms.errors import StorageUnavailableError
from tms.operations import Ack, Enqueue, Receive, Ticket
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    QueueState,
    Receipt,
    ReceiveRequest,
)
from tms.service import MessagingService
from tms.store.kv import KeyValueStore, WriteOp
from tms.store.queues import INDEX_TABLE, KEY_TABLE, QUEUE_TABLE, QueueTables
from tms.store.tables import TableBatch, Tables


def index_entries(svc: MessagingService, kv: KeyValueStore) -> list[bytes]:
    """The queue's index entries, as (kind + id) for reading."""
    prefix = prefix_of(svc)
    stop = keys.stop_key_for_prefix(prefix)
    return [
        key[len(prefix) : len(prefix) + 1] + qc.index_entry_id(key)
        for key in QueueTables(kv).index_keys(prefix, stop)
    ]


def queue_ops(write: list[WriteOp]) -> tuple[list[WriteOp], list[WriteOp]]:
    """The row ops and the index ops of one write."""
    rows = [op for op in write if op[0] == QUEUE_TABLE]
    return rows, [op for op in write if op[0] == INDEX_TABLE]


def consistent(svc: MessagingService, kv: KeyValueStore) -> tuple[int, ...]:
    """The stored counters, checked against a recount, and every message but the acked
    ones with its one index entry."""
    queues = QueueTables(kv)
    prefix = prefix_of(svc)
    stored = queues.counters(prefix)
    expected = []
    for row in queues.scan_rows(prefix):
        index = qc.index_key(prefix, row)
        if index is not None:
            expected.append(index[len(prefix) : len(prefix) + 1] + row.id)
    assert stored == recount(queues, prefix)
    assert sorted(index_entries(svc, kv)) == sorted(expected)
    return stored


def test_a_message_enqueued_and_leased_in_one_batch_is_written_once_ready_and_leased_by_a_record(
    svc: MessagingService, store: QueueStore, kv: KeyValueStore
) -> None:
    # When three messages are enqueued and received in one batch
    enqueue: Ticket[Any] = Ticket(
        Enqueue(EnqueueRequest(Q, [EnqueueItem(b"%d" % i) for i in range(3)]))
    )
    receive: Ticket[Any] = Ticket(Receive(ReceiveRequest(Q, 3)))
    store.writes.clear()
    one_batch(svc, enqueue, receive)
    # Then the batch wrote each row once, ready, with its ready entry, and the three
    # leases as one lease record (tms.queue_leases): no row rewritten for the lease
    [write] = store.writes
    rows, index = queue_ops(write)
    leased = [m.id for m in receive.result().messages]
    assert sorted(op[1][-10:] for op in rows) == sorted(leased)
    assert all(op[2] is not None for op in rows + index)
    assert sorted(op[1][len(prefix_of(svc))] for op in index) == [ord("r")] * 3
    [record] = [op for op in write if op[0] == KEY_TABLE]
    assert record[2] == qc.encode_lease_entries([(i, 1) for i in leased])
    assert sorted(index_entries(svc, kv)) == sorted(b"r" + i for i in leased)
    assert consistent(svc, kv)[QueueState.LEASED] == 3


def test_an_ack_deletes_the_lease_entry_and_puts_none(
    svc: MessagingService, store: QueueStore, kv: KeyValueStore
) -> None:
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a"), EnqueueItem(b"b")]))
    messages = svc.receive(ReceiveRequest(Q, 2)).messages
    store.writes.clear()
    assert svc.ack(AckRequest(Q, [m.receipt for m in messages])) == (AckOutcome.ACKED,) * 2
    [write] = store.writes
    rows, index = queue_ops(write)
    assert len(rows) == 2 and all(op[2] is not None for op in rows)
    assert len(index) == 2 and all(op[2] is None for op in index)  # the leases, deleted
    assert index_entries(svc, kv) == []
    assert consistent(svc, kv)[QueueState.ACKED] == 2


def test_an_ack_failing_mid_batch_leaves_the_lease_the_batch_made(
    svc: MessagingService, store: QueueStore, kv: KeyValueStore
) -> None:
    # Given a ready message
    [a] = [e.id for e in svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a")]))]
    # When one batch leases it and then acks it with a second receipt whose read fails
    # (after the ack changed the message the receive leased)
    unknown = Receipt(b"\x00" * 10, 1)
    store.fail_get = prefix_of(svc) + unknown.id
    receive: Ticket[Any] = Ticket(Receive(ReceiveRequest(Q, 1)))
    failing: Ticket[Any] = Ticket(Ack(AckRequest(Q, [Receipt(a, 1), unknown])))
    store.writes.clear()
    one_batch(svc, receive, failing)
    # Then the ack failed and left nothing: the message is leased by a lease record, its
    # row not rewritten (still ready, attempts 0)
    assert isinstance(failing.error, StorageUnavailableError)
    assert [m.id for m in receive.result().messages] == [a]
    [write] = store.writes
    rows, _index = queue_ops(write)
    assert rows == []
    assert [op[2] for op in write if op[0] == KEY_TABLE] == [qc.encode_lease_entries([(a, 1)])]
    stored = QueueTables(kv).get(prefix_of(svc), a)
    assert stored is not None and (stored.state, stored.attempts) == (QueueState.READY, 0)
    assert index_entries(svc, kv) == [b"r" + a]
    assert consistent(svc, kv)[QueueState.LEASED] == 1
    # and its lease can still be acked
    assert svc.ack(AckRequest(Q, [Receipt(a, 1)])) == (AckOutcome.ACKED,)
    assert consistent(svc, kv)[QueueState.ACKED] == 1


def test_acked_messages_are_purged_by_id_a_bounded_part_at_a_time(
    svc: MessagingService,
    kv: KeyValueStore,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a message that stays ready, then four acked; one of them also has the acked
    # index entry an earlier version wrote
    monkeypatch.setattr(queue_purge, "HOUSEKEEPING_ROWS", 2)
    [stays] = [e.id for e in svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"s", priority=9)]))]
    clock.advance(1)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"%d" % i) for i in range(4)]))
    done = svc.receive(ReceiveRequest(Q, 4)).messages
    assert stays not in [m.id for m in done]
    svc.ack(AckRequest(Q, [m.receipt for m in done]))
    prefix = prefix_of(svc)
    legacy = TableBatch()
    legacy.ops.append(
        (INDEX_TABLE, prefix + b"a" + clock.now_ms().to_bytes(8, "big") + done[0].id, b"")
    )
    Tables(kv).write(legacy)
    # When the retention has passed and purges run
    clock.advance(86_400_001)
    purged = [svc.maintain_queues() for _ in range(4)]
    # Then each purge looked at two rows at most, the next went on from there, and all
    # acked messages (and the old entry) are gone, the ready one kept
    assert purged == [1, 2, 1, 0]
    assert [row.id for row in QueueTables(kv).scan_rows(prefix)] == [stays]
    assert index_entries(svc, kv) == [b"r" + stays]
    assert consistent(svc, kv)[QueueState.ACKED] == 0
