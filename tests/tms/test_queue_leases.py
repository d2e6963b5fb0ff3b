"""Leases held in memory by the queue's writer (``tms.queue_leases``): a receive writes
one compact lease record, not its rows; after a restart the leases are rebuilt from the
records exactly, so a holder's ack is still honoured and nothing leased is handed out
again before its lease runs out; records go once their leases ran out."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeClock
from tests.tms.queue_store import PROPS, START_MS, Q, prefix_of, recount
from tms.codec import queue as qc
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    QueueState,
    ReceiveRequest,
)
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore


class Restartable:
    """A service on a LevelDB directory that can be stopped and opened again (its
    memory gone, as after ``kill -9``: a lease is never written at close)."""

    def __init__(self, path: Path, clock: FakeClock) -> None:
        self.path, self.clock = path, clock
        self.svc = self._open()

    def _open(self) -> MessagingService:
        return MessagingService(LevelDBStore(self.path), clock=self.clock, rng=random.Random(7))

    def restart(self) -> MessagingService:
        self.svc.close()
        self.svc = self._open()
        return self.svc


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Restartable]:
    r = Restartable(tmp_path / "db", FakeClock(START_MS))
    r.svc.create_topic(Q, PROPS)
    yield r
    r.svc.close()


def records(svc: MessagingService) -> list[bytes]:
    return [key for key, _value in svc._tables.queues.lease_records(prefix_of(svc))]


def test_lease_record_bytes() -> None:
    prefix = b"P"
    first = qc.queue_id(1, 2)
    key = qc.lease_record_key(prefix, 0x0102, first, 3)
    assert key == b"P\x03" + bytes.fromhex("00000000000001020000000000000001000200000003")
    assert qc.lease_record_deadline(key, 1) == 0x0102
    packed = qc.encode_lease_entries([(first, 3), (qc.queue_id(1, 3), 1)])
    assert packed == bytes.fromhex("00000000000000010002000000030000000000000001000300000001")
    assert qc.decode_lease_entries(packed) == [(first, 3), (qc.queue_id(1, 3), 1)]


def test_leases_survive_a_restart_and_their_acks_are_honoured(served: Restartable) -> None:
    # Given two messages leased for 10 s (their rows stay ready: one lease record)
    svc = served.svc
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a"), EnqueueItem(b"b"), EnqueueItem(b"c")]))
    a, b = svc.receive(ReceiveRequest(Q, 2, 10_000)).messages
    assert len(records(svc)) == 1
    # When the service restarts (its memory lost) within the leases
    svc = served.restart()
    served.clock.advance(5_000)
    # Then neither is handed out again, they are counted leased, inspect shows them,
    # and the holder's ack is honoured
    [c] = svc.receive(ReceiveRequest(Q, 10)).messages
    assert c.payload == b"c"
    stats = svc.queue_stats(Q)
    assert (stats.ready, stats.leased) == (0, 3)
    states = {m["id"]: m["state"] for m in svc.inspect(Q)["messages"]}
    assert states[a.id.hex()] == states[b.id.hex()] == "leased"
    assert svc.ack(AckRequest(Q, [a.receipt])) == (AckOutcome.ACKED,)
    assert svc.receive(ReceiveRequest(Q, 10)).messages == ()
    # and once the lease ran out (and its back-off: 2 s) only the unacked one comes back,
    # as its second delivery; the first holder's receipt is lost then, and the record goes
    served.clock.advance(5_001)
    assert svc.receive(ReceiveRequest(Q, 10)).messages == ()
    served.clock.advance(2_000)
    [again] = svc.receive(ReceiveRequest(Q, 10)).messages
    assert (again.id, again.attempt) == (b.id, 2)
    assert svc.ack(AckRequest(Q, [b.receipt])) == (AckOutcome.LEASE_LOST,)
    assert svc.ack(AckRequest(Q, [again.receipt, a.receipt])) == (AckOutcome.ACKED,) * 2
    stats = svc.queue_stats(Q)
    assert (stats.ready, stats.leased, stats.acked) == (0, 1, 2)  # c still leased
    prefix = prefix_of(svc)
    assert svc._tables.queues.counters(prefix) == recount(svc._tables.queues, prefix)
    # a's and b's record is gone; c's and b's second delivery's stay until their deadline
    firsts = {key[-14:-4] for key in records(svc)}
    assert firsts == {c.id, b.id} and len(records(svc)) == 2


def test_a_message_returned_with_its_ready_entry_unchanged_is_received_again(
    served: Restartable,
) -> None:
    # Given three messages, the first two leased (later receives start after them)
    svc = served.svc
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a"), EnqueueItem(b"b"), EnqueueItem(b"c")]))
    a, _b = svc.receive(ReceiveRequest(Q, 2)).messages
    # When the first is returned at once (due now: on this clock its ready entry is the
    # one it had) and two are received
    assert svc.nack(NackRequest(Q, [a.receipt], delay_ms=0)) == (AckOutcome.RETURNED,)
    got = svc.receive(ReceiveRequest(Q, 2)).messages
    # Then it is among them, with the one nobody had
    assert sorted((m.payload, m.attempt) for m in got) == [(b"a", 2), (b"c", 1)]


def test_an_expired_lease_dead_letters_after_max_attempts(served: Restartable) -> None:
    svc = served.svc
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a")]))
    for attempt in (1, 2, 3):  # PROPS: max_attempts 3
        [m] = svc.receive(ReceiveRequest(Q, 1, 1_000)).messages
        assert m.attempt == attempt
        if attempt == 2:
            svc = served.restart()
        served.clock.advance(60_000)
    stats = svc.queue_stats(Q)
    assert (stats.ready, stats.leased, stats.dead) == (0, 0, 1)
    row = svc._tables.queues.get(prefix_of(svc), m.id)
    assert row is not None and (row.state, row.attempts) == (QueueState.DEAD, 3)
    assert records(svc) == []


def test_the_oldest_ready_age_leaves_out_leased_messages(served: Restartable) -> None:
    # Given a message enqueued a second before another, and leased (its row stays ready)
    svc = served.svc
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a")]))
    served.clock.advance(1_000)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"b")]))
    [a] = svc.receive(ReceiveRequest(Q, 1)).messages
    assert a.payload == b"a"
    # Then the oldest ready message is the other one
    assert svc.queue_stats(Q).oldest_ready_ms == START_MS + 1_000
