"""Receives of one writer batch read each ready index entry once: a batch of N receives
costs O(N) reads, not one rescan per receive past what the batch already leased, and
they still hand out distinct messages in delivery order, before and after what the
batch itself made ready."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes import FakeClock
from tests.tms.queue_store import QueueStore, one_batch
from tms.model import TopicId
from tms.operations import Enqueue, Receive, Ticket
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    ReceiveRequest,
    ReceiveResult,
)
from tms.service import MessagingService
from tms.store.kv import KeyValueStore

Q = TopicId("ns", "work")


@pytest.fixture
def store(kv: KeyValueStore) -> QueueStore:
    return QueueStore(kv)


@pytest.fixture
def svc(store: QueueStore) -> Iterator[MessagingService]:
    clock = FakeClock(1_700_000_000_000)
    service = MessagingService(store, clock=clock, rng=random.Random(3))
    service.create_topic(Q, {"kind": "queue", "lease_s": "60"})
    yield service
    service.close()


def test_receives_of_one_batch_read_each_ready_entry_once(
    svc: MessagingService, store: QueueStore
) -> None:
    # Given 400 ready messages
    n = 400
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"%d" % i) for i in range(n)]))
    # When 200 receives of one message each are one batch
    receives: list[Ticket[ReceiveResult]] = [
        Ticket(Receive(ReceiveRequest(Q, 1))) for _ in range(n // 2)
    ]
    before = store.index_keys
    one_batch(svc, *receives, topic=Q)
    # Then they got the first 200 messages, one each, in order
    got = [m.payload for t in receives for m in t.result().messages]
    assert got == [b"%d" % i for i in range(n // 2)]
    # reading each index entry about once (one rescan per receive read ~20,000)
    assert store.index_keys - before <= 2 * n
    # and the next batch hands out the rest
    rest = svc.receive(ReceiveRequest(Q, n)).messages
    assert [m.payload for m in rest] == [b"%d" % i for i in range(n // 2, n)]


def test_receives_of_one_batch_merge_stored_and_new_messages_in_order(
    svc: MessagingService,
) -> None:
    # Given stored messages of priority 5 and 1
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"s5-%d" % i, priority=5) for i in range(3)]))
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"s1-%d" % i, priority=1) for i in range(2)]))
    # When one batch enqueues more (priority 0 and 3), receives two at a time, acks one
    # and receives again
    tickets: list[Ticket[Any]] = [
        Ticket(Receive(ReceiveRequest(Q, 2))),
        Ticket(Enqueue(EnqueueRequest(Q, [EnqueueItem(b"n0", priority=0)]))),
        Ticket(Enqueue(EnqueueRequest(Q, [EnqueueItem(b"n3", priority=3)]))),
        Ticket(Receive(ReceiveRequest(Q, 2))),
        Ticket(Receive(ReceiveRequest(Q, 2))),
        Ticket(Receive(ReceiveRequest(Q, 10))),
    ]
    one_batch(svc, *tickets, topic=Q)
    # Then every receive takes the lowest priority first among what is ready then,
    # and no message twice
    got = [[m.payload for m in t.result().messages] for t in (tickets[0], *tickets[3:])]
    assert got == [
        [b"s1-0", b"s1-1"],
        [b"n0", b"n3"],
        [b"s5-0", b"s5-1"],
        [b"s5-2"],
    ]
    # and every lease holds: each message acks once
    first = tickets[0].result().messages
    outcomes = svc.ack(AckRequest(Q, [m.receipt for m in first]))
    assert outcomes == (AckOutcome.ACKED, AckOutcome.ACKED)
    assert svc.receive(ReceiveRequest(Q, 10)).messages == ()
