"""The ``SubscriptionStore`` contract (``tms.store.subscriptions``), run on every
implementation: one parameter of the ``subscription_store`` fixture per engine. The
ZooKeeper one runs against the real 3-node ensemble of ``tests/engines.py``. An engine
added later (a shared database) adds its parameter and must pass all of this unchanged."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tms.cluster.ownership import connect
from tms.errors import BadVersionError, SubscriptionExistsError, SubscriptionNotFoundError
from tms.ids import MessageId
from tms.model import TopicId
from tms.store.leveldb import LevelDBStore
from tms.store.memory import MemoryStore
from tms.store.subscriptions import KvSubscriptionStore, SubscriptionStore
from tms.store.zookeeper import ZkSubscriptionStore
from tms.subscription import (
    PayloadFilter,
    Preferences,
    Start,
    SubscriptionData,
    SubscriptionId,
    SubscriptionState,
)
from txms_testing import ZooKeeperEnsemble

TOPIC = TopicId("ns", "t")
_zk_bases = itertools.count(1)


@dataclass
class Engine:
    store: SubscriptionStore
    reopen: Callable[[], SubscriptionStore] | None
    """A store over the same data after the process went away (None: not durable)."""


@pytest.fixture(params=["memory", "leveldb", "zookeeper"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "zookeeper":
        yield from _zookeeper(request.getfixturevalue("zk_ensemble"))
        return
    if request.param == "memory":
        kv = MemoryStore()
        yield Engine(KvSubscriptionStore(kv), None)
        kv.close()
        return
    opened = [LevelDBStore(tmp_path / "db")]

    def reopen() -> SubscriptionStore:
        opened[-1].close()
        opened.append(LevelDBStore(tmp_path / "db"))
        return KvSubscriptionStore(opened[-1])

    yield Engine(KvSubscriptionStore(opened[0]), reopen)
    opened[-1].close()


def _zookeeper(zk: ZooKeeperEnsemble) -> Iterator[Engine]:
    """The real 3-node ensemble; a reopen is a new session (another process)."""
    base = f"/substore{next(_zk_bases)}/subscriptions"
    clients = [connect(zk.connect_string, 10.0)]

    def reopen() -> SubscriptionStore:
        clients[-1].stop()
        clients.append(connect(zk.connect_string, 10.0))
        return ZkSubscriptionStore(clients[-1], base)

    yield Engine(ZkSubscriptionStore(clients[0], base), reopen)
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def store(engine: Engine) -> SubscriptionStore:
    return engine.store


def data(position: int = 0, stamp: int = 7, *, transactional: bool = False) -> SubscriptionData:
    return SubscriptionData(
        Preferences(Start.latest(), transactional, PayloadFilter((b"a",))),
        SubscriptionState(MessageId(position, 0), 1, stamp, 1_000 + position),
    )


def sub(name: str, topic: TopicId = TOPIC) -> SubscriptionId:
    return SubscriptionId(topic, name)


def test_create_then_read_gives_the_record_and_its_version(store: SubscriptionStore) -> None:
    assert store.read(sub("a")) is None
    version = store.create(sub("a"), data(5))
    record = store.read(sub("a"))
    assert record is not None
    assert record.version == version > 0
    assert record.data == data(5)


def test_create_of_an_existing_record_is_refused_and_changes_nothing(
    store: SubscriptionStore,
) -> None:
    version = store.create(sub("a"), data(1))
    with pytest.raises(SubscriptionExistsError):
        store.create(sub("a"), data(2))
    record = store.read(sub("a"))
    assert record is not None and (record.data, record.version) == (data(1), version)


def test_write_with_the_current_version_replaces_and_gives_a_new_version(
    store: SubscriptionStore,
) -> None:
    seen = {store.create(sub("a"), data(1))}
    version = min(seen)
    for position in range(2, 6):
        version = store.write(sub("a"), data(position), version)
        assert version not in seen  # never a version the record had before
        seen.add(version)
    record = store.read(sub("a"))
    assert record is not None and (record.data, record.version) == (data(5), version)


def test_write_with_a_stale_version_is_refused_and_changes_nothing(
    store: SubscriptionStore,
) -> None:
    first = store.create(sub("a"), data(1))
    second = store.write(sub("a"), data(2), first)
    with pytest.raises(BadVersionError) as raised:
        store.write(sub("a"), data(3), first)
    assert raised.value.expected == first
    assert raised.value.actual in (second, None)
    record = store.read(sub("a"))
    assert record is not None and (record.data, record.version) == (data(2), second)


def test_write_and_delete_of_a_missing_record_say_not_found(store: SubscriptionStore) -> None:
    with pytest.raises(SubscriptionNotFoundError):
        store.write(sub("nope"), data(), 1)
    with pytest.raises(SubscriptionNotFoundError):
        store.delete(sub("nope"), 1)
    assert store.read(sub("nope")) is None


def test_delete_with_the_current_version_only(store: SubscriptionStore) -> None:
    first = store.create(sub("a"), data(1))
    second = store.write(sub("a"), data(2), first)
    with pytest.raises(BadVersionError):
        store.delete(sub("a"), first)
    assert store.read(sub("a")) is not None
    store.delete(sub("a"), second)
    assert store.read(sub("a")) is None
    with pytest.raises(SubscriptionNotFoundError):
        store.delete(sub("a"), second)


def test_a_deleted_record_can_be_created_again(store: SubscriptionStore) -> None:
    store.delete(sub("a"), store.create(sub("a"), data(1, stamp=1)))
    version = store.create(sub("a"), data(9, stamp=2))
    record = store.read(sub("a"))
    assert record is not None and (record.data, record.version) == (data(9, stamp=2), version)


def test_list_gives_every_record_of_a_topic_by_name_and_nothing_else(
    store: SubscriptionStore,
) -> None:
    # Given records of the topic and of topics whose names share a prefix with it
    for name in ("b", "a", "a-1", "z_9"):
        store.create(sub(name), data(len(name)))
    store.create(sub("x", TopicId("ns", "t-x")), data())
    store.create(sub("x", TopicId("ns", "tt")), data())
    store.create(sub("x", TopicId("ns2", "t")), data())
    # When the topic's records are listed
    listed = store.list(TOPIC)
    # Then exactly its records come back, by name, with their versions
    assert [name for name, _ in listed] == ["a", "a-1", "b", "z_9"]
    for name, record in listed:
        assert record == store.read(sub(name))
    assert store.list(TopicId("ns", "empty")) == []


def test_concurrent_compare_and_set_loses_no_update(store: SubscriptionStore) -> None:
    # Given one record and 4 threads each moving it forward 25 times by compare-and-set
    store.create(sub("a"), data(0))

    def bump() -> None:
        done = 0
        while done < 25:
            record = store.read(sub("a"))
            assert record is not None
            position = record.data.state.position.publish_ms + 1
            try:
                store.write(sub("a"), data(position), record.version)
            except BadVersionError:
                continue
            done += 1

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then every successful write counted exactly once
    record = store.read(sub("a"))
    assert record is not None and record.data.state.position.publish_ms == 100


def test_what_returned_survives_a_restart(engine: Engine) -> None:
    if engine.reopen is None:
        pytest.skip("an in-memory store keeps nothing across a restart")
    store = engine.store
    kept = store.write(sub("a"), data(2), store.create(sub("a"), data(1)))
    store.delete(sub("b"), store.create(sub("b"), data(1)))
    store.create(sub("c"), data(3))
    again = engine.reopen()
    assert again.read(sub("a")) is not None
    assert again.read(sub("a")).version == kept  # type: ignore[union-attr]
    assert again.read(sub("b")) is None
    assert [name for name, _ in again.list(TOPIC)] == ["a", "c"]
