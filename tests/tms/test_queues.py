"""Queues in the core (``tms.queues``), on every storage engine, with an injected clock
and a seeded random source: scheduling, priority, leases and their back-off, dead
letters, purge, idempotent keys, and transactional enqueue and ack against a real
transaction manager."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest

from tests.fakes import FakeClock
from tests.tms.queue_store import PROPS, Q
from tms.cleanup import Cleaner
from tms.config import TmsConfig
from tms.errors import TmsInvalidArgumentError, TransactionNotInProgressError
from tms.guard import TransactionStateGuard
from tms.model import StoreRequest, TopicId
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    QueueConfig,
    QueueMessage,
    Receipt,
    ReceiveRequest,
    SettleRequest,
    backoff_ms,
)
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from txn import InProcessTxClient, TransactionManager, TxConfig


def enqueue(
    svc: MessagingService, *items: EnqueueItem | bytes, wp: int | None = None
) -> list[bytes]:
    request = EnqueueRequest(
        Q, [i if isinstance(i, EnqueueItem) else EnqueueItem(i) for i in items], wp
    )
    return [e.id for e in svc.enqueue(request)]


def receive(svc: MessagingService, n: int = 100, lease_ms: int | None = None) -> list[QueueMessage]:
    return list(svc.receive(ReceiveRequest(Q, n, lease_ms)).messages)


def ack(svc: MessagingService, *messages: QueueMessage, wp: int | None = None) -> list[AckOutcome]:
    return list(svc.ack(AckRequest(Q, [m.receipt for m in messages], wp)))


def test_scheduled_delivery_follows_the_injected_clock(
    svc: MessagingService, clock: FakeClock
) -> None:
    now = clock.now_ms()
    enqueue(svc, EnqueueItem(b"later", delay_ms=5_000), EnqueueItem(b"at", at_ms=now + 2_000))
    enqueue(svc, b"now")
    assert [m.payload for m in receive(svc)] == [b"now"]
    clock.advance(1_999)
    assert receive(svc) == []
    clock.advance(1)
    assert [m.payload for m in receive(svc)] == [b"at"]
    clock.advance(2_999)
    assert receive(svc) == []
    clock.advance(1)
    [later] = receive(svc)
    assert later.payload == b"later" and later.due_ms == now + 5_000
    stats = svc.queue_stats(Q)
    assert (stats.scheduled, stats.ready, stats.leased) == (0, 0, 3)


def test_lower_priority_first_among_due_messages(svc: MessagingService, clock: FakeClock) -> None:
    enqueue(svc, EnqueueItem(b"p5", priority=5), EnqueueItem(b"p1", priority=1))
    clock.advance(10)
    enqueue(svc, EnqueueItem(b"p0-newer", priority=0), EnqueueItem(b"p1-newer", priority=1))
    enqueue(svc, EnqueueItem(b"p0-not-due", priority=0, delay_ms=60_000))
    assert [m.payload for m in receive(svc, 2)] == [b"p0-newer", b"p1"]
    assert [m.payload for m in receive(svc)] == [b"p1-newer", b"p5"]


def test_expired_lease_redelivers_after_the_back_off_then_dead_letters(
    svc: MessagingService, clock: FakeClock
) -> None:
    config = QueueConfig.of(PROPS)
    assert config is not None
    enqueue(svc, b"job")
    expected_rng = random.Random(7)
    for attempt in (1, 2, 3):
        [m] = receive(svc)
        assert m.attempt == attempt
        assert m.lease_expires_ms == clock.now_ms() + 10_000
        clock.advance(10_000)  # the lease runs out
        expiry = m.lease_expires_ms
        if attempt == 3:
            break
        delay = backoff_ms(config, attempt, expected_rng)
        full = 2_000 * 2 ** (attempt - 1)
        assert full * 0.8 <= delay <= full
        # Redelivered exactly at expiry + back-off, on the service's clock.
        assert receive(svc) == []
        clock.advance(expiry + delay - 1 - clock.now_ms())
        assert receive(svc) == []
        clock.advance(1)
    assert receive(svc) == []
    stats = svc.queue_stats(Q)
    assert (stats.dead, stats.ready, stats.leased) == (1, 0, 0)
    report = svc.inspect(Q)
    assert [r["state"] for r in report["messages"]] == ["dead"]


def test_nack_returns_with_a_delay_or_the_back_off(svc: MessagingService, clock: FakeClock) -> None:
    enqueue(svc, b"a", b"b")
    a, b = receive(svc)
    assert svc.nack(NackRequest(Q, [a.receipt], delay_ms=0)) == (AckOutcome.RETURNED,)
    assert svc.nack(NackRequest(Q, [b.receipt])) == (AckOutcome.RETURNED,)
    [again] = receive(svc)
    assert again.payload == b"a" and again.attempt == 2
    clock.advance(2_000)
    [b2] = receive(svc)
    assert b2.payload == b"b" and b2.attempt == 2
    # a stale receipt can no longer finish it
    assert svc.nack(NackRequest(Q, [b.receipt])) == (AckOutcome.LEASE_LOST,)
    assert ack(svc, b) == [AckOutcome.LEASE_LOST]
    assert ack(svc, b2) == [AckOutcome.ACKED]
    assert ack(svc, b2) == [AckOutcome.ACKED]  # repeated: still acked, once
    assert svc.queue_stats(Q).acked == 1


def test_ack_of_an_expired_lease_nobody_else_holds_is_taken(
    svc: MessagingService, clock: FakeClock
) -> None:
    enqueue(svc, b"slow")
    [m] = receive(svc)
    clock.advance(10_000)
    assert svc.queue_stats(Q).scheduled == 1  # expired, waiting for its back-off
    assert ack(svc, m) == [AckOutcome.ACKED]
    clock.advance(60_000)
    assert receive(svc) == []


def test_acked_and_dead_messages_are_purged_after_the_retention(
    kv: KeyValueStore, clock: FakeClock
) -> None:
    svc = MessagingService(kv, clock=clock)
    q = TopicId("ns", "short")
    svc.create_topic(q, {"kind": "queue", "purge_after_s": "60", "max_attempts": "1"})
    a, b = (
        e.id
        for e in svc.enqueue(EnqueueRequest(q, [EnqueueItem(b"a", key="ka"), EnqueueItem(b"b")]))
    )
    m1, _m2 = svc.receive(ReceiveRequest(q, 2, lease_ms=1_000)).messages
    svc.ack(AckRequest(q, [m1.receipt]))
    clock.advance(1_000)  # m2's lease runs out: its last attempt, so dead
    assert svc.maintain_queues() >= 1
    assert svc.queue_stats(q).dead == 1
    clock.advance(59_000)
    svc.maintain_queues()
    assert len(svc.inspect(q)["messages"]) == 2  # not before the retention
    clock.advance(1_000)
    assert svc.maintain_queues() == 1  # acked 60 s and 1 ms ago
    assert [r["state"] for r in svc.inspect(q)["messages"]] == ["dead"]
    clock.advance(1)
    assert svc.maintain_queues() == 1
    assert svc.inspect(q)["messages"] == []
    stats = svc.queue_stats(q)
    assert (stats.acked, stats.dead) == (0, 0)
    # the key is free again once its message is purged
    [again] = svc.enqueue(EnqueueRequest(q, [EnqueueItem(b"a2", key="ka")]))
    assert not again.duplicate and again.id not in (a, b)
    svc.close()


def test_enqueue_by_key_is_idempotent(svc: MessagingService) -> None:
    [first] = enqueue(svc, EnqueueItem(b"one", key="order-17"))
    results = svc.enqueue(
        EnqueueRequest(Q, [EnqueueItem(b"two", key="order-17"), EnqueueItem(b"x", key="order-18")])
    )
    assert results[0].id == first and results[0].duplicate
    assert not results[1].duplicate
    assert sorted(m.payload for m in receive(svc)) == [b"one", b"x"]
    with pytest.raises(TmsInvalidArgumentError):
        EnqueueRequest(Q, [EnqueueItem(b"a", key="k"), EnqueueItem(b"b", key="k")])


def test_queue_and_topic_operations_do_not_mix(svc: MessagingService) -> None:
    topic = TopicId("ns", "plain")
    svc.create_topic(topic)
    with pytest.raises(TmsInvalidArgumentError, match="not a queue"):
        svc.enqueue(EnqueueRequest(topic, [EnqueueItem(b"x")]))
    with pytest.raises(TmsInvalidArgumentError, match="is a queue"):
        svc.publish(StoreRequest.of(Q, [b"x"]))
    with pytest.raises(TmsInvalidArgumentError, match="is a queue"):
        svc.fetch(Q)
    with pytest.raises(TmsInvalidArgumentError, match="cannot change"):
        svc.update_topic(topic, {"kind": "queue"})
    with pytest.raises(TmsInvalidArgumentError):
        svc.create_topic(TopicId("ns", "bad"), {"kind": "queue", "lease_s": "0"})
    with pytest.raises(TmsInvalidArgumentError):
        svc.create_topic(TopicId("ns", "bad"), {"kind": "stack"})
    assert enqueue(svc, b"still works")


def test_deleting_a_queue_hides_its_messages(svc: MessagingService) -> None:
    enqueue(svc, b"old", EnqueueItem(b"k", key="k"))
    svc.delete_topic(Q)
    svc.create_topic(Q, PROPS)
    assert receive(svc) == []
    [fresh] = svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"k2", key="k")]))
    assert not fresh.duplicate


def test_receipts_are_checked() -> None:
    with pytest.raises(TmsInvalidArgumentError):
        Receipt.parse("zz.1")
    with pytest.raises(TmsInvalidArgumentError):
        Receipt(b"\x00" * 10, 0)
    r = Receipt(bytes(range(10)), 3)
    assert Receipt.parse(str(r)) == r
    with pytest.raises(TmsInvalidArgumentError):
        ReceiveRequest(Q, 0)


# -- transactions ---------------------------------------------------------------------


@pytest.fixture
def manager() -> Iterator[TransactionManager]:
    m = TransactionManager(TxConfig(cleanup_interval_s=0))
    m.start()
    yield m
    m.stop()


@pytest.fixture
def txsvc(
    kv: KeyValueStore, manager: TransactionManager, clock: FakeClock
) -> Iterator[MessagingService]:
    guard = TransactionStateGuard(InProcessTxClient(manager), max_age_s=0)
    service = MessagingService(kv, guard=guard, clock=clock, rng=random.Random(1))
    service.create_topic(Q, PROPS)
    yield service
    service.close()


def test_transactional_enqueue_is_received_only_after_commit(
    txsvc: MessagingService, manager: TransactionManager
) -> None:
    txns = InProcessTxClient(manager)
    tx = txns.start_short()
    enqueue(txsvc, b"in tx", wp=tx.write_pointer)
    assert receive(txsvc) == []
    assert txsvc.queue_stats(Q).pending == 1
    txns.commit_or_throw(tx)
    # The service settles it by itself once the manager says it committed...
    assert [m.payload for m in receive(txsvc)] == [b"in tx"]
    # ... and an explicit settle of a committed transaction is allowed, and changes nothing.
    assert txsvc.settle(SettleRequest(Q, tx.write_pointer, commit=True)) == 0


def test_rolled_back_or_invalid_enqueues_are_never_received(
    txsvc: MessagingService, manager: TransactionManager
) -> None:
    txns = InProcessTxClient(manager)
    aborted, invalid, running = txns.start_short(), txns.start_short(), txns.start_short()
    enqueue(txsvc, EnqueueItem(b"rolled back", key="k"), wp=aborted.write_pointer)
    enqueue(txsvc, b"invalid", wp=invalid.write_pointer)
    # A key of a transaction still pending cannot be taken by another one.
    with pytest.raises(TransactionNotInProgressError, match="not settled"):
        enqueue(txsvc, EnqueueItem(b"other", key="k"), wp=running.write_pointer)
    # A settle before the commit is refused.
    with pytest.raises(TransactionNotInProgressError):
        txsvc.settle(SettleRequest(Q, aborted.write_pointer, commit=True))
    assert txsvc.settle(SettleRequest(Q, aborted.write_pointer, commit=False)) == 1
    txns.abort(aborted)
    txns.invalidate(invalid.transaction_id)
    assert receive(txsvc) == []
    stats = txsvc.queue_stats(Q)
    assert (stats.pending, stats.ready) == (0, 0)
    # the rolled-back key is free again
    [e] = txsvc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"other", key="k")], running.write_pointer))
    assert not e.duplicate
    txns.commit_or_throw(running)


def test_transactional_ack_takes_effect_only_at_commit(
    txsvc: MessagingService, manager: TransactionManager, clock: FakeClock
) -> None:
    txns = InProcessTxClient(manager)
    enqueue(txsvc, b"a", b"b")
    a, b = receive(txsvc, lease_ms=50)
    tx_a, tx_b = txns.start_short(), txns.start_short()
    assert ack(txsvc, a, wp=tx_a.write_pointer) == [AckOutcome.PENDING]
    assert ack(txsvc, b, wp=tx_b.write_pointer) == [AckOutcome.PENDING]
    # another transaction cannot ack what one has pending
    assert ack(txsvc, a, wp=tx_b.write_pointer) == [AckOutcome.LEASE_LOST]
    # rolled back: the ack is undone and the message comes back when its lease is over
    assert txsvc.settle(SettleRequest(Q, tx_b.write_pointer, commit=False)) == 1
    txns.abort(tx_b)
    txns.commit_or_throw(tx_a)
    assert txsvc.queue_stats(Q).acked == 1
    assert receive(txsvc) == []  # b's lease still holds
    clock.advance(50 + 2_000)  # its lease, then the back-off of attempt 1 (<= 2 s)
    [again] = receive(txsvc)
    assert again.payload == b"b" and again.attempt == 2


def test_cleanup_settles_pending_work_of_finished_transactions_and_bounds_pruning(
    kv: KeyValueStore, manager: TransactionManager
) -> None:
    # Given a service that cannot ask the manager itself (no guard), whose clients died
    # before settling: one transaction committed, one invalidated, one still running
    svc = MessagingService(kv, TmsConfig(tx_max_lifetime_s=1, cleanup_grace_s=0))
    svc.create_topic(Q, PROPS)
    txns = InProcessTxClient(manager)
    committed, invalid, running = txns.start_short(), txns.start_short(), txns.start_short()
    enqueue(svc, b"committed", wp=committed.write_pointer)
    enqueue(svc, b"invalid", wp=invalid.write_pointer)
    enqueue(svc, b"running", wp=running.write_pointer)
    txns.commit_or_throw(committed)
    txns.invalidate(invalid.transaction_id)
    assert receive(svc) == []  # nothing settles them without the manager
    time.sleep(1.1)  # the transactions are past their lifetime: the bound may pass them
    # When cleanup runs with the manager's view
    report = Cleaner(svc, txns).run_once()
    # Then the committed enqueue is deliverable, the invalid one gone, the running one
    # still pending, and the prune bound stays below it
    assert [m.payload for m in receive(svc)] == [b"committed"]
    stats = svc.queue_stats(Q)
    assert stats.pending == 1
    assert report.prune_upper_bound < running.write_pointer
    assert report.prune_upper_bound >= invalid.write_pointer
    txns.abort(running)
    svc.close()


def test_metrics_count_each_state_and_the_oldest_ready_age(
    svc: MessagingService, clock: FakeClock
) -> None:
    enqueue(svc, b"a", b"b", EnqueueItem(b"later", delay_ms=60_000))
    receive(svc, 1)
    clock.advance(2_500)
    text = svc.metrics.exposition().decode()
    labels = '{namespace="ns",topic="jobs"}'
    for name, value in (("ready", 1), ("leased", 1), ("scheduled", 1), ("dead", 0)):
        assert f"tms_queue_{name}_messages{labels} {value}.0" in text
    assert f"tms_queue_oldest_ready_age_seconds{labels} 2.5" in text
