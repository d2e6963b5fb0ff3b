"""A queue operation that fails part way through a batch (a read of the store fails)
leaves nothing of itself behind: the operations after it in the same batch start from
what is written, and the stored counters equal a recount of the queue's messages. The
writer's row cache (``tms.queue_rows``) never answers from a row the store may not
hold: a write that fails may still have landed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.fakes import FakeClock
from tests.tms.queue_store import Q, QueueStore, one_batch, prefix_of, recount
from tms import queue_ready
from tms.errors import StorageUnavailableError
from tms.operations import Enqueue, Receive, Ticket
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    QueueState,
    Receipt,
    ReceiveRequest,
    ReceiveResult,
)
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.queues import QueueTables
from tms.store.tables import TableBatch, Tables


def stored_and_recounted(svc: MessagingService, kv: KeyValueStore) -> tuple[Any, Any]:
    queues = QueueTables(kv)
    prefix = prefix_of(svc)
    return queues.counters(prefix), recount(queues, prefix)


@pytest.fixture
def no_ready_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue writer's ready window of no keys: its receives read the store's index."""
    monkeypatch.setattr(queue_ready, "MAX_KEYS", 0)


@pytest.mark.usefixtures("no_ready_window")
@pytest.mark.parametrize("enqueue_first", [False, True], ids=["first", "after-an-enqueue"])
def test_a_receive_failing_after_its_housekeeping_leaves_nothing_to_the_next(
    svc: MessagingService,
    store: QueueStore,
    kv: KeyValueStore,
    clock: FakeClock,
    enqueue_first: bool,
) -> None:
    # Given a ready window of no keys (tms.queue_ready), so receives read the store's
    # ready index, and three messages, the first leased and its lease run out
    # (housekeeping of the next receive makes it ready again)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a"), EnqueueItem(b"b"), EnqueueItem(b"c")]))
    (first,) = svc.receive(ReceiveRequest(Q, 1, 1_000)).messages
    assert first.payload == b"a"
    clock.advance(60_000)
    # When two receives are one batch (maybe after an enqueue) and the first fails
    # reading the ready messages, after its housekeeping changed the expired lease
    store.fail_under = prefix_of(svc) + b"r"
    failing: Ticket[ReceiveResult] = Ticket(Receive(ReceiveRequest(Q, 1)))
    after: Ticket[ReceiveResult] = Ticket(Receive(ReceiveRequest(Q, 1)))
    enqueue = Ticket(Enqueue(EnqueueRequest(Q, [EnqueueItem(b"d")])))
    one_batch(svc, *([enqueue] if enqueue_first else []), failing, after)
    # Then the first fails alone, the second does the housekeeping itself and leases the
    # oldest ready message, and the stored counters are those of the stored messages
    assert isinstance(failing.error, StorageUnavailableError)
    assert [m.payload for m in after.result().messages] == [b"b"]
    stored, recount = stored_and_recounted(svc, kv)
    assert stored == recount
    ready = [b"a", b"c", b"d"] if enqueue_first else [b"a", b"c"]
    assert (stored[QueueState.READY], stored[QueueState.LEASED]) == (len(ready), 1)
    # and the message whose lease ran out is delivered again
    assert sorted(m.payload for m in svc.receive(ReceiveRequest(Q, 10)).messages) == ready
    stored, recount = stored_and_recounted(svc, kv)
    assert stored == recount and stored[QueueState.LEASED] == len(ready) + 1


def test_an_ack_that_failed_but_landed_is_not_undone_by_a_cached_lease(
    svc: MessagingService, store: QueueStore, kv: KeyValueStore
) -> None:
    # Given a message leased (its row cached as leased by the writer)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"job")]))
    (message,) = svc.receive(ReceiveRequest(Q, 1)).messages
    # When its ack is written but answered with a failure
    store.lands_then_fails = True
    with pytest.raises(StorageUnavailableError):
        svc.ack(AckRequest(Q, [message.receipt]))
    # Then the writer goes by the store, where the message is acked: a nack of the same
    # receipt finds it acked and it is never delivered again
    assert svc.nack(NackRequest(Q, [message.receipt], delay_ms=0)) == (AckOutcome.ACKED,)
    assert svc.receive(ReceiveRequest(Q, 10)).messages == ()
    assert svc.ack(AckRequest(Q, [message.receipt])) == (AckOutcome.ACKED,)
    # and the counters the next write stores are the store's, not the cached ones
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"next")]))
    stored, recount = stored_and_recounted(svc, kv)
    assert stored == recount
    counts = stored[QueueState.READY], stored[QueueState.LEASED], stored[QueueState.ACKED]
    assert counts == (1, 0, 1)


def test_an_answer_that_writes_nothing_is_the_stores_not_the_caches(
    svc: MessagingService, kv: KeyValueStore
) -> None:
    # Given a message leased (held in the writer's memory as leased, attempt 1; its row
    # stays ready), then leased again behind the writer's back (as another instance that
    # took the topic over would: attempt 2)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"job")]))
    (first,) = svc.receive(ReceiveRequest(Q, 1)).messages
    queues = QueueTables(kv)
    prefix = prefix_of(svc)
    stored = queues.get(prefix, first.id)
    assert stored is not None and (stored.state, stored.attempts) == (QueueState.READY, 0)
    again = dataclasses.replace(
        stored, state=QueueState.LEASED, attempts=2, lease_ms=first.lease_expires_ms
    )
    batch = TableBatch()
    queues.put_row(batch, prefix, stored, again)
    Tables(kv).write(batch)
    # When the second delivery is nacked, and the first acked
    # Then the answers are the store's: the second's lease is returned, and the first's
    # lease is lost
    second = Receipt(first.id, 2)
    assert svc.nack(NackRequest(Q, [second], delay_ms=0)) == (AckOutcome.RETURNED,)
    assert svc.ack(AckRequest(Q, [first.receipt])) == (AckOutcome.LEASE_LOST,)
