"""The queue writer's row cache (``tms.queue_rows``) never answers from a row the store
may not hold: a write that fails may still have landed, so the writer forgets every
cached row then and reads the store again."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes import FakeClock
from tms.errors import StorageUnavailableError
from tms.model import TopicId
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    ReceiveRequest,
)
from tms.service import MessagingService
from tms.store.kv import KeyValueStore

Q = TopicId("ns", "cached")


class LandsThenFails:
    """A real store whose next write, once armed, is applied and then reported failed
    (fault injection: the sync's answer is lost, the data is on disk)."""

    def __init__(self, inner: KeyValueStore) -> None:
        self.inner = inner
        self.armed = False

    def write(self, *args: Any, **kwargs: Any) -> None:
        self.inner.write(*args, **kwargs)
        if self.armed:
            self.armed = False
            raise StorageUnavailableError("injected: the write's answer was lost")

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


@pytest.fixture
def store(kv: KeyValueStore) -> LandsThenFails:
    return LandsThenFails(kv)


@pytest.fixture
def svc(store: LandsThenFails) -> Iterator[MessagingService]:
    clock = FakeClock(1_700_000_000_000)
    service = MessagingService(store, clock=clock, rng=random.Random(5))
    service.create_topic(Q, {"kind": "queue", "lease_s": "60"})
    yield service
    service.close()


def test_an_ack_that_failed_but_landed_is_not_undone_by_a_cached_lease(
    svc: MessagingService, store: LandsThenFails
) -> None:
    # Given a message leased (its row cached as leased by the writer)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"job")]))
    (message,) = svc.receive(ReceiveRequest(Q, 1)).messages
    # When its ack is written but answered with a failure
    store.armed = True
    with pytest.raises(StorageUnavailableError):
        svc.ack(AckRequest(Q, [message.receipt]))
    # Then the writer goes by the store, where the message is acked: a nack of the same
    # receipt finds it acked and it is never delivered again
    assert svc.nack(NackRequest(Q, [message.receipt], delay_ms=0)) == (AckOutcome.ACKED,)
    assert svc.receive(ReceiveRequest(Q, 10)).messages == ()
    assert svc.ack(AckRequest(Q, [message.receipt])) == (AckOutcome.ACKED,)
    # and the counters the next write stores are the store's, not the cached ones
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"next")]))
    stats = svc.queue_stats(Q)
    assert (stats.ready, stats.leased, stats.acked) == (1, 0, 1)
