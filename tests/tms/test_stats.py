"""``tms.stats``: what a topic holds, exact while small, estimated past the limit, and
the publish rate over the last minute, on real LevelDB tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeClock
from tms.config import TmsConfig
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.stats import topic_stats
from tms.store.leveldb import LevelDBStore
from tms.store.tables import Tables

T = TopicId("ns", "t")
NOW = 1_700_000_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def store(tmp_path: Path) -> LevelDBStore:
    return LevelDBStore(tmp_path / "db")


@pytest.fixture
def service(store: LevelDBStore, clock: FakeClock) -> Iterator[MessagingService]:
    svc = MessagingService(store, TmsConfig(tx_max_lifetime_s=10**10), clock=clock)
    svc.create_topic(T, {"ttl": "86400"})
    yield svc
    svc.close()


def test_an_empty_topic(service: MessagingService) -> None:
    stats = service.topic_stats(T)
    assert (stats.messages, stats.payload_bytes, stats.exact) == (0, 0, True)
    assert stats.first_publish_ms is None and stats.last_publish_ms is None
    assert stats.publish_rate == 0 and stats.ttl_s == 86400 and stats.generation == 1


def test_counts_every_stored_message_exactly_below_the_limit(
    service: MessagingService, clock: FakeClock
) -> None:
    # Given plain messages, a rolled-back publish and a commit marker of three payloads
    service.publish(StoreRequest.of(T, [b"a", b"bb"]))
    clock.advance(1000)
    detail = service.publish(StoreRequest.of(T, [b"ccc"], tx_write_pointer=clock.now_ms() * 10**6))
    assert detail is not None
    service.rollback(T, detail)
    clock.advance(1000)
    wp = clock.now_ms() * 10**6
    service.store(StoreRequest.of(T, [b"dddd", b"e", b"ff"], tx_write_pointer=wp))
    service.publish(StoreRequest.of(T, [], tx_write_pointer=wp))
    # Then every stored message counts, the rolled-back one and each staged payload too
    stats = service.topic_stats(T)
    assert (stats.messages, stats.payload_bytes, stats.exact) == (6, 13, True)
    assert stats.first_publish_ms == NOW and stats.last_publish_ms == NOW + 2000
    assert stats.publish_rate == pytest.approx(6 / 60)


def test_rate_counts_only_the_last_minute(service: MessagingService, clock: FakeClock) -> None:
    service.publish(StoreRequest.of(T, [b"old"] * 30))
    clock.advance(120_000)
    service.publish(StoreRequest.of(T, [b"new"] * 12))
    clock.advance(1_000)
    assert service.topic_stats(T).publish_rate == pytest.approx(12 / 60)


def test_past_the_limit_counts_are_estimates(
    service: MessagingService, store: LevelDBStore, clock: FakeClock
) -> None:
    # Given 400 messages over 400 ms and a counting limit of 100 rows
    for _ in range(40):
        service.publish(StoreRequest.of(T, [b"x" * 10] * 10))
        clock.advance(10)
    metadata = service.get_topic(T)
    stats = topic_stats(Tables(store), metadata, clock.now_ms(), count_limit=100)
    # Then the counts are marked as estimates, in the right range
    assert not stats.exact
    assert 200 <= stats.messages <= 800
    assert stats.payload_bytes == pytest.approx(stats.messages * 10, rel=0.01)
    # And past the limit within the rate window, the rate is over the rows counted
    assert stats.publish_rate > 400 / 60


def test_a_deleted_and_recreated_topic_counts_its_new_generation(
    service: MessagingService,
) -> None:
    service.publish(StoreRequest.of(T, [b"gone"] * 5))
    service.delete_topic(T)
    service.create_topic(T)
    service.publish(StoreRequest.of(T, [b"kept"]))
    stats = service.topic_stats(T)
    assert (stats.messages, stats.generation) == (1, 2)


def test_namespace_stats_cover_every_topic(service: MessagingService) -> None:
    service.create_topic(TopicId("ns", "u"))
    service.create_topic(TopicId("other", "v"))
    service.publish(StoreRequest.of(TopicId("ns", "u"), [b"1", b"2"]))
    assert [(s.topic, s.messages) for s in service.namespace_stats("ns")] == [("t", 0), ("u", 2)]
