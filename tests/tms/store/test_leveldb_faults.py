"""``LevelDBStore`` on a real full disk (a small tmpfs): a failed write takes the store
down — reads and writes raise ``StorageUnavailableError`` — until it has been reopened;
then writes go on, ``epoch`` has moved, and everything acknowledged is there, also after
closing and opening it again. Scans cut by a reopen fail cleanly, and concurrent readers
and writers through the episode neither crash nor lose an acknowledged write."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.diskfaults import TmpfsDisk
from tms.errors import StorageUnavailableError
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore

PAD = b"v" * 1000


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[TmpfsDisk]:
    d = TmpfsDisk(tmp_path, size_bytes=32 << 20)  # room to reopen: log + table at once
    yield d
    d.close()


def _fill_until_failure(store: LevelDBStore, acked: list[bytes], first: int = 0) -> int:
    table = store.table(b"x")
    i = first
    while True:
        key = b"%08d" % i
        try:
            table.write([(key, PAD)])
        except StorageUnavailableError:
            return i
        acked.append(key)
        i += 1


def test_a_failed_write_takes_the_store_down_until_reopened(full_disk: TmpfsDisk) -> None:
    store = LevelDBStore(full_disk.data, retry_interval_s=0)
    table = store.table(b"x")
    acked: list[bytes] = []
    for i in range(10):
        table.write([(b"%08d" % i, PAD)])
        acked.append(b"%08d" % i)
    scan = table.scan()
    assert next(scan)[0] == acked[0]  # a scan in progress across the episode
    # When the disk fills and a write fails
    full_disk.fill()
    failed_at = _fill_until_failure(store, acked, first=10)
    assert store.epoch == 0
    # Then the store is down: reads fail too (reopening needs space)
    with pytest.raises(StorageUnavailableError):
        table.get(acked[0])
    with pytest.raises(StorageUnavailableError):
        list(table.scan())
    # And once there is space again it reopens, and writes go on
    full_disk.free()
    assert table.get(acked[0]) == PAD
    assert store.epoch == 1
    with pytest.raises(StorageUnavailableError):
        list(scan)  # its database was closed under it: an error, not a crash
    for i in range(failed_at + 1, failed_at + 50):
        table.write([(b"%08d" % i, PAD)])
        acked.append(b"%08d" % i)
    store.close()
    reopened = LevelDBStore(full_disk.data)
    try:
        keys = [k for k, _ in reopened.table(b"x").scan()]
    finally:
        reopened.close()
    assert not set(acked) - set(keys)


def test_concurrent_readers_and_writers_through_the_episode(full_disk: TmpfsDisk) -> None:
    store = LevelDBStore(full_disk.data, retry_interval_s=0.01)
    svc = MessagingService(store)
    topics = [TopicId("ns", f"t{i}") for i in range(4)]
    for topic in topics:
        svc.create_topic(topic)
    acked: dict[TopicId, list[bytes]] = {t: [] for t in topics}
    stop = threading.Event()
    errors: list[BaseException] = []

    def publisher(topic: TopicId) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            payload = b"%s-%d" % (topic.topic.encode(), n)
            try:
                svc.publish(StoreRequest.of(topic, [payload]))
            except StorageUnavailableError:
                continue
            except BaseException as exc:  # anything else is a bug
                errors.append(exc)
                return
            acked[topic].append(payload)

    def reader(topic: TopicId) -> None:
        while not stop.is_set():
            try:
                svc.fetch(topic)
            except StorageUnavailableError:
                pass
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=publisher, args=(t,)) for t in topics]
    threads += [threading.Thread(target=reader, args=(t,)) for t in topics[:2]]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            # Given load, when the disk fills and empties again (three times)
            stop.wait(0.3)
            full_disk.fill()
            stop.wait(0.3)
            full_disk.free()
        stop.wait(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors
    assert store.epoch >= 1
    assert all(acked.values())
    svc.close()
    # Then after a restart every acknowledged message is there, in order
    svc = MessagingService(LevelDBStore(full_disk.data))
    try:
        for topic in topics:
            found = [m.payload for m in svc.fetch(topic).messages]
            assert [p for p in found if p in set(acked[topic])] == acked[topic]
    finally:
        svc.close()
