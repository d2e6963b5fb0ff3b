"""CDAP's MessagingHttpServiceTest and MessageTableTest scenarios at the service level,
on both backends, plus TTLs, generations and long-poll notification.

The service here has no transaction service: its guard is the default ``ClockGuard``,
which lets these storage tests use write pointers of their own (past ones); the checks
against a real manager are in ``test_guard.py`` and the integration tests."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from tests.fakes import FakeClock
from tests.tms.helpers import payloads, tx
from tms.codec import keys
from tms.config import TmsConfig
from tms.errors import (
    TmsInvalidArgumentError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
    TransactionTooOldError,
)
from tms.fetcher import FetchRequest
from tms.ids import MessageId
from tms.model import MarkersRequest, RollbackDetail, StoreRequest, TopicBounds, TopicId
from tms.operations import Publish, Store
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.memory import MemoryStore
from tms.store.tables import Tables

NS = "ns1"
T1 = TopicId(NS, "t1")
NOW = 1_700_000_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def svc(kv: KeyValueStore, clock: FakeClock) -> Iterator[MessagingService]:
    service = MessagingService(kv, TmsConfig(tx_max_lifetime_s=10**10), clock=clock)
    yield service
    service.close()


def fetch(svc: MessagingService, topic: TopicId = T1, **kw: object) -> list[bytes]:
    return payloads(svc.fetch(topic, FetchRequest(**kw)).messages)  # type: ignore[arg-type]


def test_metadata_endpoints(svc: MessagingService) -> None:
    with pytest.raises(TopicNotFoundError):
        svc.get_topic(T1)
    svc.create_topic(T1)
    with pytest.raises(TopicAlreadyExistsError):
        svc.create_topic(T1)
    assert svc.get_topic(T1).ttl_s == 604800
    assert svc.update_topic(T1, {"ttl": "5"}).ttl_s == 5
    with pytest.raises(TmsInvalidArgumentError):
        svc.create_topic(TopicId(NS, "t2"), {"ttl": "xyz"})
    svc.create_topic(TopicId(NS, "t2"), {"ttl": "5"})
    assert svc.list_topics(NS) == [T1, TopicId(NS, "t2")]
    svc.delete_topic(T1)
    svc.delete_topic(TopicId(NS, "t2"))
    with pytest.raises(TopicNotFoundError):
        svc.delete_topic(T1)
    with pytest.raises(TopicNotFoundError):
        svc.update_topic(T1, {"ttl": "5"})
    assert svc.list_topics(NS) == []


def test_generation_properties(svc: MessagingService) -> None:
    for i in range(1, 6):
        svc.create_topic(T1, {"ttl": "100"})
        meta = svc.get_topic(T1)
        assert (meta.generation, meta.ttl_s) == (i, 100)
        svc.delete_topic(T1)


def test_deletes_do_not_leak_across_generations(svc: MessagingService, clock: FakeClock) -> None:
    for i in range(10):
        svc.create_topic(T1)
        svc.publish(StoreRequest.of(T1, [f"a{i}", f"b{i}"]))
        clock.advance(1)
        assert fetch(svc) == [f"a{i}".encode(), f"b{i}".encode()]
        svc.delete_topic(T1)
        with pytest.raises(TopicNotFoundError):
            svc.fetch(T1)


def test_basic_pub_sub(svc: MessagingService, clock: FakeClock) -> None:
    with pytest.raises(TopicNotFoundError):
        svc.publish(StoreRequest.of(T1, ["x"]))
    with pytest.raises(TopicNotFoundError):
        svc.fetch(T1)
    svc.create_topic(T1)
    with pytest.raises(TmsInvalidArgumentError):
        svc.publish(StoreRequest.of(T1, []))
    assert svc.publish(StoreRequest.of(T1, ["m0", "m1"])) is None
    clock.advance(1)
    detail = svc.publish(StoreRequest.of(T1, ["m2"], tx_write_pointer=1))
    assert detail is not None
    svc.rollback(T1, detail)
    msgs = svc.fetch(T1).messages
    assert payloads(msgs) == [b"m0", b"m1", b"m2"]  # non-transactional readers see rollbacks
    assert fetch(svc, start_ms=0, transaction=tx(3, 3, (), (2,))) == [b"m0", b"m1"]
    m1, m2 = msgs[1].id, msgs[2].id
    assert fetch(svc, start_id=m1, inclusive=False) == [b"m2"]
    assert fetch(svc, start_id=m2, inclusive=False) == []
    assert fetch(svc, start_ms=m1.publish_ms, limit=2) == [b"m0", b"m1"]
    clock.advance(1)
    svc.publish(StoreRequest.of(T1, ["m3"], tx_write_pointer=2))
    svc.publish(StoreRequest.of(T1, ["m4"]))
    assert fetch(svc, start_id=m1, inclusive=False) == [b"m2", b"m3", b"m4"]
    held = svc.fetch(T1, FetchRequest(start_id=m1, inclusive=False, transaction=tx(3, 3, (), (2,))))
    assert held.messages == [] and held.held  # stops at m3; m4 is not skipped to
    assert fetch(svc, start_id=m1, inclusive=False, transaction=tx(3, 3, (2,), ())) == [b"m4"]
    assert fetch(svc, start_id=m1, inclusive=False, transaction=tx(3, 3)) == [b"m3", b"m4"]


def test_non_tx_and_tx_consumption(svc: MessagingService) -> None:
    svc.create_topic(T1)
    for wp in (100, 101, 102):
        svc.publish(StoreRequest.of(T1, [b"%d" % wp] * 50, tx_write_pointer=wp))
    assert len(fetch(svc)) == 150 and len(fetch(svc, limit=85)) == 85
    assert len(fetch(svc, transaction=tx(200, 200))) == 150
    only = svc.fetch(T1, FetchRequest(transaction=tx(200, 200, invalids=(101,)))).messages
    assert set(payloads(only)) == {b"100", b"102"} and len(only) == 100
    assert len(fetch(svc, transaction=tx(100, 100, (), (101,)))) == 50
    assert len(fetch(svc, transaction=tx(100, 100, (), (101,)), limit=10)) == 10


def test_own_writes_are_visible(svc: MessagingService) -> None:
    svc.create_topic(T1)
    svc.publish(StoreRequest.of(T1, ["mine"], tx_write_pointer=500))
    assert fetch(svc, transaction=tx(400, 500, (), ())) == [b"mine"]


def test_payload_table(svc: MessagingService, clock: FakeClock) -> None:
    svc.create_topic(T1)
    with pytest.raises(TmsInvalidArgumentError):
        svc.store(StoreRequest.of(T1, [], tx_write_pointer=1))
    for i in range(10):
        svc.store(StoreRequest.of(T1, [f"{i}a", f"{i}b"], tx_write_pointer=1))
        clock.advance(1)
    assert fetch(svc) == []  # nothing references them yet
    svc.publish(StoreRequest.of(T1, [], tx_write_pointer=1))
    all_msgs = svc.fetch(T1).messages
    assert payloads(all_msgs) == [f"{i}{s}".encode() for i in range(10) for s in "ab"]
    ids = [m.id for m in all_msgs]
    assert len(fetch(svc, start_id=ids[10])) == 10
    assert len(fetch(svc, start_id=ids[11], inclusive=False)) == 8
    assert fetch(svc, start_id=ids[-1], inclusive=False) == []
    assert len(fetch(svc, limit=6)) == 6
    svc.store(StoreRequest.of(T1, ["x", "y"], tx_write_pointer=2))
    svc.publish(StoreRequest.of(T1, [], tx_write_pointer=2))
    assert len(fetch(svc)) == 22
    assert fetch(svc, start_id=ids[19], inclusive=False) == [b"x", b"y"]


def test_reuse_request(svc: MessagingService) -> None:
    svc.create_topic(T1)
    request = StoreRequest.of(T1, ["m1", "m2"])
    svc.publish(request)
    svc.publish(request)
    assert fetch(svc) == [b"m1", b"m2", b"m1", b"m2"]


def test_transaction_max_lifetime(kv: KeyValueStore, clock: FakeClock) -> None:
    svc = MessagingService(kv, TmsConfig(tx_max_lifetime_s=60), clock=clock)
    svc.create_topic(T1)
    fresh = (NOW - 1_000) * 1_000_000
    assert svc.publish(StoreRequest.of(T1, ["a"], tx_write_pointer=fresh)) is not None
    stale = (NOW - 61_000) * 1_000_000
    with pytest.raises(TransactionTooOldError):
        svc.publish(StoreRequest.of(T1, ["b"], tx_write_pointer=stale))
    with pytest.raises(TransactionTooOldError):
        svc.store(StoreRequest.of(T1, ["b"], tx_write_pointer=stale))
    assert fetch(svc) == [b"a"]


def test_write_many_operations_each_with_its_own_outcome(
    kv: KeyValueStore, clock: FakeClock
) -> None:
    svc = MessagingService(kv, TmsConfig(tx_max_lifetime_s=60), clock=clock)
    svc.create_topic(T1)
    wp = (NOW - 1_000) * 1_000_000
    stale = (NOW - 61_000) * 1_000_000
    tickets = svc.write(
        [
            Publish(StoreRequest.of(T1, ["a"])),
            Publish(StoreRequest.of(T1, [])),  # empty and not transactional
            Store(StoreRequest.of(T1, ["s1"], tx_write_pointer=wp)),
            Publish(StoreRequest.of(T1, ["b"], tx_write_pointer=stale)),
            Publish(StoreRequest.of(T1, [], tx_write_pointer=wp)),  # commit marker
            Store(StoreRequest.of(T1, ["late"], tx_write_pointer=wp)),  # after the seal
            Publish(StoreRequest.of(T1, ["c"])),
        ],
    )
    kinds = [type(t.error).__name__ if t.error is not None else t.result() for t in tickets]
    assert kinds[0] is None and kinds[2] is None and kinds[6] is None
    assert kinds[1] == kinds[5] == "TmsInvalidArgumentError"
    assert kinds[3] == "TransactionTooOldError"
    marker = tickets[4].result()
    assert isinstance(marker, RollbackDetail) and marker.tx_write_pointer == wp
    # The marker expands to the stored payload; nothing of the failed ones is there.
    assert fetch(svc, transaction=tx(wp + 1, wp + 2)) == [b"a", b"s1", b"c"]
    sample = svc.metrics.registry.get_sample_value
    assert sample("tms_requests_total", {"op": "publish", "outcome": "error"}) == 2
    assert sample("tms_requests_total", {"op": "store", "outcome": "ok"}) == 1
    [missing] = svc.write([Publish(StoreRequest.of(TopicId(NS, "missing"), ["a"]))])
    assert isinstance(missing.error, TopicNotFoundError)


def test_markers_are_atomic_contiguous_and_idempotent(svc: MessagingService) -> None:
    # Given payloads staged under three write pointers and a message published between
    svc.create_topic(T1)
    for wp, name in ((101, "a"), (102, "b"), (103, "c")):
        svc.store(StoreRequest.of(T1, [f"{name}1", f"{name}2"], tx_write_pointer=wp))
    svc.publish(StoreRequest.of(T1, ["before"]))
    # When their markers are published in one request, with a key
    request = MarkersRequest(T1, (102, 101, 103, 101), "job-7")
    result = svc.publish_markers(request)
    # Then the markers sit next to each other, in request order, after "before"
    assert [d.tx_write_pointer for d in result.details] == [102, 101, 103]
    positions = [(d.start_ms, d.start_seq) for d in result.details]
    assert positions == sorted(positions) and not result.duplicate
    assert positions[2][1] - positions[0][1] == 2
    reader = tx(200, 201)
    assert fetch(svc, transaction=reader) == [b"before", b"b1", b"b2", b"a1", b"a2", b"c1", b"c2"]
    # and repeating the request (same key) changes nothing and says so
    again = svc.publish_markers(MarkersRequest(T1, (102, 101, 103), "job-7"))
    assert again.duplicate and again.details == result.details
    assert len(fetch(svc, transaction=reader)) == 7
    # A marker of a write pointer sealed by the request is the earlier one, not a copy
    svc.store(StoreRequest.of(T1, ["d1"], tx_write_pointer=104))
    mixed = svc.publish_markers(MarkersRequest(T1, (104, 101)))
    assert mixed.details[1] == result.details[1]
    assert fetch(svc, transaction=reader)[-1] == b"d1"


def test_markers_all_or_nothing(kv: KeyValueStore, clock: FakeClock) -> None:
    svc = MessagingService(kv, TmsConfig(tx_max_lifetime_s=60), clock=clock)
    svc.create_topic(T1)
    fresh, stale = (NOW - 1_000) * 1_000_000, (NOW - 61_000) * 1_000_000
    with pytest.raises(TransactionTooOldError):
        svc.publish_markers(MarkersRequest(T1, (fresh, stale), "k"))
    assert fetch(svc) == [] and Tables(kv).idempotency.get(svc_prefix(svc), "k") is None
    for bad in ((), (0,), (-5,), (True,)):
        with pytest.raises(TmsInvalidArgumentError):
            MarkersRequest(T1, bad)  # type: ignore[arg-type]
    for key in ("", "has space", "x" * 201, "é"):
        with pytest.raises(TmsInvalidArgumentError):
            MarkersRequest(T1, (fresh,), key)
    with pytest.raises(TopicNotFoundError):
        svc.publish_markers(MarkersRequest(TopicId(NS, "missing"), (fresh,)))


def svc_prefix(svc: MessagingService, topic: TopicId = T1) -> bytes:
    return keys.topic_prefix(topic, svc.get_topic(topic).generation)


def test_bounds_stop_where_a_transactional_reader_would(svc: MessagingService) -> None:
    svc.create_topic(T1)
    assert svc.bounds(T1) == TopicBounds(None, None, None)
    svc.publish(StoreRequest.of(T1, ["a", "b"]))
    svc.publish(StoreRequest.of(T1, ["committed"], tx_write_pointer=90))
    svc.rollback(T1, svc.publish(StoreRequest.of(T1, ["x"], tx_write_pointer=91)))  # type: ignore[arg-type]
    svc.publish(StoreRequest.of(T1, ["invalid"], tx_write_pointer=95))
    svc.publish(StoreRequest.of(T1, ["open"], tx_write_pointer=97))
    svc.publish(StoreRequest.of(T1, ["after"]))
    ids = [m.id for m in svc.fetch(T1).messages]  # all 7, the rolled-back one included
    pos = [(i.publish_ms, i.seq) for i in ids]
    reader = tx(96, 98, invalids=(95,), in_progress=(97,))
    # transactional: stops at the open transaction's entry; skipped ones are passed over
    assert svc.bounds(T1, FetchRequest(transaction=reader)) == TopicBounds(pos[0], pos[4], pos[5])
    # everything, without a transaction; from an id, exclusive
    assert svc.bounds(T1) == TopicBounds(pos[0], pos[6], None)
    later = FetchRequest(start_id=ids[5], inclusive=False, transaction=reader)
    assert svc.bounds(T1, later) == TopicBounds(pos[6], pos[6], None)
    held_first = FetchRequest(start_id=ids[5], transaction=reader)
    assert svc.bounds(T1, held_first) == TopicBounds(None, None, pos[5])


def test_topic_sizes_metric(svc: MessagingService, kv: KeyValueStore) -> None:
    t2 = TopicId(NS, "t2")
    svc.create_topic(T1)
    svc.create_topic(t2)
    svc.publish(StoreRequest.of(T1, [os.urandom(1000) for _ in range(100)]))
    svc.store(StoreRequest.of(t2, [os.urandom(1000) for _ in range(20)], tx_write_pointer=7))
    if isinstance(kv, LevelDBStore):
        kv.db.compact_range()  # LevelDB counts data once it is out of the write buffer,
        # in blocks of ~4 KiB

    def size(topic: TopicId) -> float:
        return svc.metrics.value("tms_topic_bytes", {"namespace": NS, "topic": topic.topic})

    assert size(T1) > size(t2) > 0
    if isinstance(kv, MemoryStore):
        assert 100_000 < size(T1) < 103_000 and 20_000 < size(t2) < 21_000
    svc.delete_topic(T1)
    assert size(T1) == 0 and size(t2) > 0
    assert b"tms_topic_bytes{" in svc.metrics.exposition()


def test_topic_ttl_bound_and_start_positions(svc: MessagingService, clock: FakeClock) -> None:
    svc.create_topic(T1, {"ttl": "10"})
    svc.publish(StoreRequest.of(T1, ["old"]))
    old_id = svc.fetch(T1).messages[0].id
    clock.advance(6_000)
    svc.publish(StoreRequest.of(T1, ["new"]))
    clock.advance(5_000)  # "old" is now 11 s old
    assert fetch(svc) == [b"new"]
    assert fetch(svc, start_id=old_id) == [b"new"]  # an expired start id starts at the bound
    assert fetch(svc, start_ms=clock.now_ms() + 1000) == []  # the future holds nothing


def test_per_message_ttl(svc: MessagingService, clock: FakeClock) -> None:
    svc.create_topic(T1, {"ttl": "100"})
    svc.publish(StoreRequest(T1, [b"short", b"long", b"capped"], ttls=[2, None, 1000]))
    svc.store(
        StoreRequest(T1, [b"p-short", b"p-long"], tx_write_pointer=NOW * 1_000_000, ttls=[2, None])
    )
    svc.publish(StoreRequest.of(T1, [], tx_write_pointer=NOW * 1_000_000))
    assert fetch(svc) == [b"short", b"long", b"capped", b"p-short", b"p-long"]
    clock.advance(3_000)
    assert fetch(svc) == [b"long", b"capped", b"p-long"]
    clock.advance(100_000)
    assert fetch(svc) == []  # the topic's TTL caps every message's


def test_requests_are_validated() -> None:
    with pytest.raises(TmsInvalidArgumentError):
        FetchRequest(limit=0)
    with pytest.raises(TmsInvalidArgumentError):
        FetchRequest(start_ms=-1)
    with pytest.raises(TmsInvalidArgumentError):
        FetchRequest(start_id=MessageId(1, 1), start_ms=1)
    with pytest.raises(TmsInvalidArgumentError):
        StoreRequest(T1, [b"x"], ttls=[0])
    with pytest.raises(TmsInvalidArgumentError):
        TopicId("bad ns", "t")
    with pytest.raises(TmsInvalidArgumentError):
        TopicId("ns", "bad:topic")


def test_long_poll_wakes_on_publish(svc: MessagingService) -> None:
    svc.create_topic(T1)
    version = svc.fetch(T1).version
    seen: list[int] = []
    svc.add_listener(lambda topic, v: seen.append(v))
    timer = threading.Timer(0.05, lambda: svc.publish(StoreRequest.of(T1, ["wake"])))
    timer.start()
    new_version = svc.wait_for_change(T1, version, timeout_s=5)
    timer.join()
    assert new_version > version and seen == [new_version]
    assert svc.wait_for_change(T1, new_version, timeout_s=0.01) == new_version  # times out


def test_metrics_count_what_happened(svc: MessagingService) -> None:
    svc.create_topic(T1)
    svc.publish(StoreRequest.of(T1, ["ab", "cde"]))
    svc.fetch(T1)
    m = svc.metrics
    labels = {"namespace": NS, "topic": "t1"}
    assert m.value("tms_published_messages_total", {**labels, "op": "write"}) == 2
    assert m.value("tms_published_bytes_total", {**labels, "op": "write"}) == 5
    assert m.value("tms_fetched_messages_total", labels) == 2
    assert m.value("tms_requests_total", {"op": "publish", "outcome": "ok"}) == 1
    assert b"tms_writer_batch_operations" in m.exposition()


def test_a_read_with_most_rows_stops_once_it_passed_that_many(svc: MessagingService) -> None:
    # Given 50 entries of an invalid transaction (a reader skips them), then 2 messages
    svc.create_topic(T1)
    svc.publish(StoreRequest(T1, [b"x"] * 50, tx_write_pointer=5))
    svc.publish(StoreRequest(T1, [b"a", b"b"]))
    reader = tx(100, 101, invalids=(5,))
    # When a read may pass 20 rows, it stops unfinished: cut, neither held nor ended
    short = svc.read(T1, FetchRequest(transaction=reader), most_rows=20)
    assert list(short) == []
    assert short.cut and not short.held and short.end is None
    # And one that may pass 100 reads the messages, not cut
    whole = svc.read(T1, FetchRequest(transaction=reader), most_rows=100)
    assert payloads(list(whole)) == [b"a", b"b"]
    assert not whole.cut
