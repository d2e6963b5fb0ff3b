"""The sans-I/O core of the queue shells (``tms.client.queuecore``): conversions, and a
transaction's queue work, checked without a service."""

from __future__ import annotations

from tms.client.queuecore import TxQueueWork, delay_ms_of, lease_ms_of, wait_ms_of
from tms.errors import ServiceUnavailableError, TopicNotFoundError
from tms.model import TopicId

A, B = TopicId("ns", "a"), TopicId("ns", "b")


def test_times_are_sent_in_ms() -> None:
    assert lease_ms_of(None) is None
    assert lease_ms_of(0.0001) == 1  # a lease is at least 1 ms
    assert lease_ms_of(2.5) == 2500
    assert wait_ms_of(1.25) == 1250
    assert delay_ms_of(None) is None
    assert delay_ms_of(0) == 0


def test_work_is_settled_once_per_queue_and_pointer_in_order() -> None:
    work = TxQueueWork()
    for topic, wp in [(B, 7), (A, 9), (A, 7), (B, 7)]:
        work.joined(topic, wp)
    assert work.to_settle() == [(A, 7), (A, 9), (B, 7)]


def test_a_rollback_is_proven_only_when_nothing_is_in_doubt_and_all_settled() -> None:
    work = TxQueueWork()
    work.joined(A, 1)
    assert work.rollback_proven(settled_all=True)
    assert not work.rollback_proven(settled_all=False)
    work.failed(TopicNotFoundError("refused: nothing was written"))
    assert work.rollback_proven(settled_all=True)
    work.failed(ServiceUnavailableError("no answer"))  # the write may have landed
    assert not work.rollback_proven(settled_all=True)
