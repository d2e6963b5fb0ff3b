"""The ready window (``tms.queue_ready``): once a receive has read a queue's ready
entries from the store, the next receives take them from the writer's memory, exact as
the writer's own writes change them; bounded, so a long queue goes on in the store."""

from __future__ import annotations

import pytest

from tests.tms.queue_store import Q, QueueStore, prefix_of
from tms import queue_ready
from tms.queue_ready import ReadyWindow
from tms.queues import (
    AckOutcome,
    AckRequest,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    ReceiveRequest,
)
from tms.service import MessagingService


def test_receives_take_ready_entries_from_memory_once_learnt(
    svc: MessagingService, store: QueueStore
) -> None:
    # Given a receive that read every ready entry of the store (and acked them)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"a%d" % i) for i in range(10)]))
    first = svc.receive(ReceiveRequest(Q, 100)).messages
    svc.ack(AckRequest(Q, [m.receipt for m in first]))
    # When more are enqueued, with priorities, and received in pieces
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"b%d" % i, priority=i % 3) for i in range(30)]))
    before = store.index_keys
    got = []
    while batch := svc.receive(ReceiveRequest(Q, 7)).messages:
        got.extend(batch)
    # Then each is delivered once, in order, without reading the ready index again
    expected = sorted(range(30), key=lambda i: (i % 3, i))
    assert [m.payload for m in got] == [b"b%d" % i for i in expected]
    assert store.index_keys == before


def test_a_bounded_window_goes_on_in_the_store(
    svc: MessagingService, store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a window of at most 4 keys
    monkeypatch.setattr(queue_ready, "MAX_KEYS", 4)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"x")]))
    [x] = svc.receive(ReceiveRequest(Q, 10)).messages
    # When 25 messages of three priorities are enqueued, received three at a time,
    # every fifth returned at once
    for i in range(25):
        svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"%d" % i, priority=i % 3)]))
    svc.ack(AckRequest(Q, [x.receipt]))
    got: list[bytes] = []
    returned: set[bytes] = set()
    while batch := svc.receive(ReceiveRequest(Q, 3)).messages:
        for m in batch:
            if int(m.payload) % 5 == 0 and m.payload not in returned:
                returned.add(m.payload)
                svc.nack(NackRequest(Q, [m.receipt], delay_ms=0))
            else:
                got.append(m.payload)
                svc.ack(AckRequest(Q, [m.receipt]))
    # Then every message is acked exactly once, the returned ones again after
    assert sorted(got) == sorted(b"%d" % i for i in range(25))
    assert len(returned) == 5
    assert svc.queue_stats(Q).acked == 26


def test_window_learns_extends_and_follows_writes() -> None:
    w = ReadyWindow()
    assert not w.covers(b"a")
    w.learn(b"b", [b"b1", b"b5"], b"b6")  # the store's entries in [b, b6)
    assert w.covers(b"b") and w.covers(b"b5") and not w.covers(b"b6") and not w.covers(b"a")
    w.learn(b"b6", [b"b7"], None)  # from where it ended: extends it, to the end
    assert list(w.keys_from(b"b2")) == [b"b5", b"b7"]
    w.update(deleted=[b"b5", b"b9"], put=[b"a0", b"b3", b"c"])  # a0: outside, not known
    assert list(w.keys_from(b"")) == [b"b1", b"b3", b"b7", b"c"]
    w.learn(b"d", [b"d1"], b"d2")  # elsewhere: replaces it
    assert list(w.keys_from(b"")) == [b"d1"] and not w.covers(b"b1")
    w.clear()
    assert not w.covers(b"d") and len(w) == 0


def test_window_over_its_bound_drops_its_last_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_ready, "MAX_KEYS", 3)
    w = ReadyWindow()
    w.learn(b"k", [b"k1", b"k2"], None)
    w.update(deleted=[], put=[b"k0", b"k3", b"k4"])
    assert list(w.keys_from(b"")) == [b"k0", b"k1", b"k2"] and len(w) == 3
    assert w.covers(b"k2") and not w.covers(b"k3")  # the rest is the store's
    w.update(deleted=[], put=[b"k5"])  # past the window: not kept
    assert list(w.keys_from(b"")) == [b"k0", b"k1", b"k2"]


def test_a_window_is_filled_to_the_end_after_a_receive_that_stopped_early(
    svc: MessagingService, store: QueueStore
) -> None:
    # Given 50 ready messages, and a receive of 10 (its scan stopped at the tenth)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"%d" % i) for i in range(50)]))
    first = svc.receive(ReceiveRequest(Q, 10)).messages
    before = store.index_keys
    # When 20 more are enqueued and all are received, ten at a time
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"%d" % i) for i in range(50, 70)]))
    got = list(first)
    while batch := svc.receive(ReceiveRequest(Q, 10)).messages:
        got.extend(batch)
    # Then each once, in order, none read from the store's ready index again
    assert [m.payload for m in got] == [b"%d" % i for i in range(70)]
    assert store.index_keys == before


def test_window_fill_takes_what_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_ready, "MAX_KEYS", 4)
    w = ReadyWindow()
    w.learn(b"k", [b"k1"], b"k2")
    w.fill(iter([b"k2", b"k3"]))  # all fit: to the end
    assert list(w.keys_from(b"")) == [b"k1", b"k2", b"k3"] and w.high is None
    w.learn(b"m", [b"m1", b"m2"], b"m3")
    w.fill(iter([b"m3", b"m4", b"m5"]))  # room for two: the window ends at the third
    assert list(w.keys_from(b"")) == [b"m1", b"m2", b"m3", b"m4"] and w.high == b"m5"


def test_a_fill_that_fails_to_read_forgets_the_window(
    svc: MessagingService, store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a window of at most 4 keys over 20 ready messages, three of them leased
    monkeypatch.setattr(queue_ready, "MAX_KEYS", 4)
    svc.enqueue(EnqueueRequest(Q, [EnqueueItem(b"%02d" % i) for i in range(20)]))
    first = svc.receive(ReceiveRequest(Q, 3)).messages
    # When the batch of their ack is written and the read that fills the window fails
    store.fail_under = prefix_of(svc) + b"r"
    assert svc.ack(AckRequest(Q, [m.receipt for m in first])) == (AckOutcome.ACKED,) * 3
    assert store.fail_under is None  # the fill read, and failed
    # Then the ack stands, and the receives go on from the store: each message once
    got = [m.payload for m in first]
    while batch := svc.receive(ReceiveRequest(Q, 5)).messages:
        got.extend(m.payload for m in batch)
    assert got == [b"%02d" % i for i in range(20)]
