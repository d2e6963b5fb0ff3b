"""Dead-letter queues (``tms.queue_dead``) on every storage engine: a message that fails
its last attempt moves to the queue its ``dead_letter_queue`` names, with its payload,
key, priority and attempts; never lost, never deliverable in both, once only when the
move is interrupted between its steps and run again; the settings are checked."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeClock
from tms.codec import keys
from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId
from tms.operations import DeadLetterIn
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    QueueMessage,
    ReceiveRequest,
)
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.queues import QueueTables
from tms.store.tables import TableBatch

Q = TopicId("ns", "jobs")
DLQ = TopicId("ns", "jobs-dead")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


def open_service(kv: KeyValueStore, clock: FakeClock) -> MessagingService:
    return MessagingService(kv, clock=clock, rng=random.Random(7))


@pytest.fixture
def svc(kv: KeyValueStore, clock: FakeClock) -> Iterator[MessagingService]:
    service = open_service(kv, clock)
    service.create_topic(DLQ, {"kind": "queue", "max_attempts": "0"})
    service.create_topic(Q, {"kind": "queue", "max_attempts": "2", "dead_letter_queue": DLQ.topic})
    yield service
    service.close()


def receive(svc: MessagingService, topic: TopicId = Q, n: int = 100) -> list[QueueMessage]:
    return list(svc.receive(ReceiveRequest(topic, n)).messages)


def fail_twice(svc: MessagingService, clock: FakeClock) -> list[QueueMessage]:
    """Deliver everything ready in Q twice, nacking each delivery: the second fails the
    last attempt. The deliveries of the second round."""
    for m in receive(svc):
        svc.nack(NackRequest(Q, [m.receipt], 0))
    last = receive(svc)
    outcomes = svc.nack(NackRequest(Q, [m.receipt for m in last], 0))
    assert set(outcomes) == {AckOutcome.DEAD}
    return last


def wait_moved(svc: MessagingService, n: int) -> None:
    """Until the service's own mover has moved ``n`` messages (it runs after the batch
    that made them dead, on its own thread)."""
    deadline = time.monotonic() + 10
    while svc.queue_stats(DLQ).ready < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_message_failing_its_last_attempt_moves_to_the_dead_letter_queue(
    svc: MessagingService, clock: FakeClock
) -> None:
    # Given messages with a key, a priority, a schedule
    enqueued_at = clock.now_ms()
    svc.enqueue(
        EnqueueRequest(Q, [EnqueueItem(b"bad", key="k-1", priority=3), EnqueueItem(b"worse")])
    )
    clock.advance(1_000)
    # When they fail their last attempt
    last = fail_twice(svc, clock)
    wait_moved(svc, 2)
    # Then they are in the dead-letter queue, ready, as they were, and no longer in Q
    moved = sorted(receive(svc, DLQ), key=lambda m: m.payload)
    assert [(m.payload, m.key, m.priority, m.attempt, m.enqueued_ms) for m in moved] == [
        (b"bad", "k-1", 3, 3, enqueued_at),  # attempt 3: its third delivery
        (b"worse", None, 0, 3, enqueued_at),
    ]
    stats = svc.queue_stats(Q)
    assert (stats.dead, stats.ready, stats.leased, stats.scheduled) == (0, 0, 0, 0)
    assert svc.inspect(Q)["messages"] == []
    # the old receipts finish nothing any more; the key is free in Q again
    assert list(svc.ack(AckRequest(Q, [last[0].receipt]))) == [AckOutcome.UNKNOWN]
    [again] = svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"retry", key="k-1")]))
    assert not again.duplicate
    # and the dead letter's key is the dead-letter queue's now
    [dup] = svc.enqueue(EnqueueRequest(DLQ, [EnqueueItem(b"x", key="k-1")]))
    assert dup.duplicate and dup.id == next(m for m in moved if m.key == "k-1").id


def test_without_the_property_dead_messages_stay(kv: KeyValueStore, clock: FakeClock) -> None:
    svc = open_service(kv, clock)
    try:
        svc.create_topic(Q, {"kind": "queue", "max_attempts": "2"})
        svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"x")]))
        fail_twice(svc, clock)
        assert svc.move_dead_letters(Q) == 0
        assert [r["state"] for r in svc.inspect(Q)["messages"]] == ["dead"]
    finally:
        svc.close()


def test_a_move_interrupted_between_its_steps_adds_no_second_copy(
    tmp_path: Path, clock: FakeClock
) -> None:
    # Given a dead message whose copy was written, and a crash before its removal
    # (the mover is stopped so that only the steps done here happen)
    svc = open_service(LevelDBStore(tmp_path / "db"), clock)
    svc.create_topic(DLQ, {"kind": "queue", "max_attempts": "0"})
    svc.create_topic(Q, {"kind": "queue", "max_attempts": "1", "dead_letter_queue": DLQ.topic})
    svc._mover.shutdown(wait=True)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"dying", key="k")]))
    [m] = receive(svc)
    svc.nack(NackRequest(Q, [m.receipt], 0))
    prefix = keys.topic_prefix(Q, svc.get_topic(Q).generation)
    [(_key, row, _dest)] = svc._tables.queues.moving(prefix, 10)
    assert svc.submit(DeadLetterIn(DLQ, prefix, (row.message(),))) == 1  # step 2 only
    svc.close()
    # When the service restarts and the move runs again (as cleanup runs it)
    svc = open_service(LevelDBStore(tmp_path / "db"), clock)
    try:
        assert svc.move_dead_letters(Q) == 1
        # Then the dead-letter queue has it once, and Q not at all
        assert [m.payload for m in receive(svc, DLQ)] == [b"dying"]
        assert svc.queue_stats(DLQ).leased == 1 and svc.queue_stats(DLQ).ready == 0
        assert svc.inspect(Q)["messages"] == []
        assert svc.move_dead_letters(Q) == 0
    finally:
        svc.close()


def test_a_dead_message_on_its_way_is_never_delivered_nor_acked(
    kv: KeyValueStore, clock: FakeClock
) -> None:
    svc = open_service(kv, clock)
    try:
        svc.create_topic(DLQ, {"kind": "queue"})
        svc.create_topic(Q, {"kind": "queue", "max_attempts": "1", "dead_letter_queue": DLQ.topic})
        svc._mover.shutdown(wait=True)  # keep it on its way
        svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"x")]))
        [m] = receive(svc)
        svc.nack(NackRequest(Q, [m.receipt], 0))
        assert [r["state"] for r in svc.inspect(Q)["messages"]] == ["moving"]
        assert svc.queue_stats(Q).dead == 1  # counted as dead while on its way
        assert receive(svc) == []
        assert list(svc.ack(AckRequest(Q, [m.receipt]))) == [AckOutcome.LEASE_LOST]
        svc.maintain_queues()  # cleanup moves it
        assert svc.queue_stats(Q).dead == 0 and svc.queue_stats(DLQ).ready == 1
    finally:
        svc.close()


def test_a_dead_letters_key_taken_in_the_dead_letter_queue_stays_the_other_messages(
    svc: MessagingService, clock: FakeClock
) -> None:
    [first] = svc.enqueue(EnqueueRequest(DLQ, [EnqueueItem(b"there first", key="k")]))
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"dead", key="k")]))
    fail_twice(svc, clock)
    wait_moved(svc, 2)
    got = {m.payload: m for m in receive(svc, DLQ)}
    assert got[b"dead"].key == "k"  # kept in its row
    # When the dead letter is acked and purged, the key stays the first message's
    svc.ack(AckRequest(DLQ, [got[b"dead"].receipt]))
    clock.advance(86_400_000 + 1)
    svc.maintain_queues()
    [dup] = svc.enqueue(EnqueueRequest(DLQ, [EnqueueItem(b"x", key="k")]))
    assert dup.duplicate and dup.id == first.id


@pytest.mark.parametrize(
    ("dead_letter_queue", "message"),
    [
        ("jobs", "its own"),
        ("missing", "not a queue"),
        ("plain", "not a queue"),
        ("a b", "Invalid topic"),
    ],
)
def test_the_dead_letter_queue_must_be_another_queue(
    svc: MessagingService, dead_letter_queue: str, message: str
) -> None:
    svc.create_topic(TopicId("ns", "plain"))
    props = {"kind": "queue", "dead_letter_queue": dead_letter_queue}
    with pytest.raises(TmsInvalidArgumentError, match=message):
        svc.update_topic(Q, props)
    own = dead_letter_queue == Q.topic
    new = TopicId("ns", "new")
    with pytest.raises(TmsInvalidArgumentError, match=message):
        svc.create_topic(new, {**props, "dead_letter_queue": "new"} if own else props)


def stuck_on_its_way(kv: KeyValueStore, clock: FakeClock) -> MessagingService:
    """A service whose queue Q has one message MOVING to DLQ (its mover stopped)."""
    svc = open_service(kv, clock)
    svc.create_topic(DLQ, {"kind": "queue", "max_attempts": "0"})
    svc.create_topic(Q, {"kind": "queue", "max_attempts": "1", "dead_letter_queue": DLQ.topic})
    svc._mover.shutdown(wait=True)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"dying")]))
    [m] = receive(svc)
    svc.nack(NackRequest(Q, [m.receipt], 0))
    assert [r["state"] for r in svc.inspect(Q)["messages"]] == ["moving"]
    return svc


def test_removing_the_property_finishes_the_moves_under_way(
    kv: KeyValueStore, clock: FakeClock
) -> None:
    svc = stuck_on_its_way(kv, clock)
    try:
        # When the dead-letter queue is unset while a message is on its way there
        svc.update_topic(Q, {"kind": "queue", "max_attempts": "1"})
        # Then the move still ends where it was going
        assert svc.move_dead_letters(Q) == 1
        assert svc.inspect(Q)["messages"] == []
        assert [m.payload for m in receive(svc, DLQ)] == [b"dying"]
        # and later dead messages stay dead in the queue
        svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"later")]))
        [m] = receive(svc)
        svc.nack(NackRequest(Q, [m.receipt], 0))
        assert [r["state"] for r in svc.inspect(Q)["messages"]] == ["dead"]
    finally:
        svc.close()


def test_a_new_dead_letter_queue_gets_no_second_copy_of_a_move_half_done(
    kv: KeyValueStore, clock: FakeClock
) -> None:
    # Given a message copied to DLQ (step 2) but not yet removed from Q
    svc = stuck_on_its_way(kv, clock)
    try:
        prefix = keys.topic_prefix(Q, svc.get_topic(Q).generation)
        [row] = svc._tables.queues.scan_rows(prefix)
        assert svc.submit(DeadLetterIn(DLQ, prefix, (row.message(),))) == 1
        # When Q's dead-letter queue is changed to another queue
        other = TopicId("ns", "other")
        svc.create_topic(other, {"kind": "queue"})
        svc.update_topic(Q, {"kind": "queue", "max_attempts": "1", "dead_letter_queue": "other"})
        # Then the move finishes: one copy, in DLQ, none in the new one
        assert svc.move_dead_letters(Q) == 1
        assert svc.inspect(Q)["messages"] == []
        assert [m.payload for m in receive(svc, DLQ)] == [b"dying"]
        assert receive(svc, other) == []
    finally:
        svc.close()


def test_a_move_whose_dead_letter_queue_was_deleted_leaves_the_message_dead(
    kv: KeyValueStore, clock: FakeClock
) -> None:
    svc = stuck_on_its_way(kv, clock)
    try:
        svc.update_topic(Q, {"kind": "queue", "max_attempts": "1"})
        svc.delete_topic(DLQ)
        assert svc.move_dead_letters(Q) == 1
        assert [r["state"] for r in svc.inspect(Q)["messages"]] == ["dead"]
        assert svc.queue_stats(Q).dead == 1
        assert svc.move_dead_letters(Q) == 0
    finally:
        svc.close()


def test_a_destination_row_is_the_queue_name_beside_the_message() -> None:
    batch = TableBatch()
    QueueTables.put_destination(batch, b"P", b"0123456789", "jobs-dead")
    QueueTables.delete_destination(batch, b"P", b"0123456789")
    assert batch.ops == [
        (b"qk", b"P\x010123456789", b"jobs-dead"),
        (b"qk", b"P\x010123456789", None),
    ]


def origin_rows(svc: MessagingService, topic: TopicId) -> list[bytes]:
    """The dead-letter origin rows (both ways) in a queue's key table."""
    prefix = keys.topic_prefix(topic, svc.get_topic(topic).generation)
    return [
        k[len(prefix) :][:1]
        for k, _v in svc._tables.queues.keys.scan(prefix, keys.stop_key_for_prefix(prefix))
        if k[len(prefix) : len(prefix) + 1] in (b"\x00", b"\x02")
    ]


def test_origin_rows_are_purged_with_the_copy(kv: KeyValueStore, clock: FakeClock) -> None:
    svc = open_service(kv, clock)
    try:
        svc.create_topic(DLQ, {"kind": "queue", "max_attempts": "1", "purge_after_s": "60"})
        svc.create_topic(Q, {"kind": "queue", "max_attempts": "1", "dead_letter_queue": DLQ.topic})
        # Given two dead letters moved to the dead-letter queue, one acked there and one
        # dead there too
        svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"acked"), EnqueueItem(b"dead")]))
        for m in receive(svc):
            svc.nack(NackRequest(Q, [m.receipt], 0))
        wait_moved(svc, 2)
        svc.move_dead_letters(Q)
        assert svc.inspect(Q)["messages"] == []
        assert sorted(origin_rows(svc, DLQ)) == [b"\x00", b"\x00", b"\x02", b"\x02"]
        for m in receive(svc, DLQ):
            if m.payload == b"acked":
                svc.ack(AckRequest(DLQ, [m.receipt]))
            else:
                svc.nack(NackRequest(DLQ, [m.receipt], 0))
        # When they are past the retention and purged
        clock.advance(61_000)
        svc.maintain_queues()
        # Then their origin rows went with them
        assert svc.inspect(DLQ)["messages"] == []
        assert origin_rows(svc, DLQ) == []
    finally:
        svc.close()


def test_a_copy_is_purged_only_once_its_move_finished(tmp_path: Path, clock: FakeClock) -> None:
    # Given a move interrupted after the copy (step 2), the copy acked and past the
    # retention while its original is still on its way
    svc = open_service(LevelDBStore(tmp_path / "db"), clock)
    try:
        svc.create_topic(DLQ, {"kind": "queue", "max_attempts": "0", "purge_after_s": "60"})
        svc.create_topic(Q, {"kind": "queue", "max_attempts": "1", "dead_letter_queue": DLQ.topic})
        svc._mover.shutdown(wait=True)
        svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"dying")]))
        [m] = receive(svc)
        svc.nack(NackRequest(Q, [m.receipt], 0))
        prefix = keys.topic_prefix(Q, svc.get_topic(Q).generation)
        [(_key, row, _dest)] = svc._tables.queues.moving(prefix, 10)
        assert svc.submit(DeadLetterIn(DLQ, prefix, (row.message(),))) == 1  # step 2 only
        [copy] = receive(svc, DLQ)
        svc.ack(AckRequest(DLQ, [copy.receipt]))
        clock.advance(61_000)
        # When the housekeeping runs (it purges, then finishes the move)
        svc.maintain_queues()
        # Then the copy was kept that time, with its origin rows, and the move again
        # adds no second copy
        assert svc.queue_stats(DLQ).acked == 1
        assert sorted(origin_rows(svc, DLQ)) == [b"\x00", b"\x02"]
        assert svc.submit(DeadLetterIn(DLQ, prefix, (row.message(),))) == 0
        assert svc.inspect(Q)["messages"] == []  # the original is gone now
        # and the next housekeeping purges the copy and its origin rows
        svc.maintain_queues()
        assert svc.inspect(DLQ)["messages"] == []
        assert origin_rows(svc, DLQ) == []
    finally:
        svc.close()
