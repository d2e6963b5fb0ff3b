"""A commit riding on a subscription's poll: written while the read goes on, answered
only once durable, and a failed write fails the poll and moves nothing; the commits of
many polls at once share a synced write."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tms.errors import BadVersionError, StorageUnavailableError, TmsInvalidArgumentError
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.subscriptions import SUBSCRIPTION_TABLE, KvSubscriptionStore
from tms.store.tables import MESSAGE_TABLE
from tms.subscription import Preferences, Start, SubscriptionData, SubscriptionId

T = TopicId("ns", "t")
SUB = SubscriptionId(T, "s")


class _WatchedTables:
    """The service's store; once ``armed``, a read of messages (a scan of the message
    table in chunks: the checks of a commit only look at its last entry) first waits
    (at most 5 s) for ``writing``, then sets ``read``."""

    def __init__(self, inner: KeyValueStore) -> None:
        self._inner = inner
        self.armed = False
        self.writing = threading.Event()
        self.read = threading.Event()

    def table(self, name: bytes) -> Any:
        inner, watched = self._inner.table(name), self

        class Table:
            def __getattr__(self, attr: str) -> Any:
                if watched.armed and (name, attr) == (MESSAGE_TABLE, "scan_chunks"):
                    watched.writing.wait(5)
                    watched.read.set()
                return getattr(inner, attr)

        return Table()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


class StalledRecords(KvSubscriptionStore):
    """Fault injection: a record's write waits until ``gate`` opens (at most 20 s), or
    fails with ``fail``; ``writing`` is set while one waits."""

    def __init__(self, kv: KeyValueStore, writing: threading.Event) -> None:
        super().__init__(kv)
        self.gate = threading.Event()
        self.gate.set()
        self.writing = writing
        self.fail: Exception | None = None

    def write(self, sub: SubscriptionId, data: SubscriptionData, version: int) -> int:
        self.writing.set()
        self.gate.wait(20)
        if self.fail is not None:
            raise self.fail
        return super().write(sub, data, version)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[MessagingService, StalledRecords, _WatchedTables]]:
    kv = LevelDBStore(tmp_path / "db")
    tables = _WatchedTables(kv)
    records = StalledRecords(kv, tables.writing)
    svc = MessagingService(tables, subscription_store=records)
    svc.create_topic(T)
    svc.publish(StoreRequest.of(T, ["a", "b", "c", "d"]))
    svc.subscriptions.create(SUB, Preferences(Start.earliest()))
    yield svc, records, tables
    svc.close()


def test_the_read_goes_on_while_the_commit_is_written_and_waits_for_it(
    setup: tuple[MessagingService, StalledRecords, _WatchedTables],
) -> None:
    svc, records, tables = setup
    first = svc.subscriptions.read(SUB, limit=2)
    # Given the record's write stalled
    records.gate.clear()
    tables.armed = True
    with ThreadPoolExecutor(1) as pool:
        # When a poll commits the first batch's position riding on the next read
        polling = pool.submit(
            svc.subscriptions.read,
            SUB,
            start_from=first.position,
            limit=2,
            commit_version=first.version,
        )
        # Then the messages are read while the commit is being written...
        assert tables.read.wait(10)
        # ...and the poll answers only once the commit is durable
        assert not polling.done()
        records.gate.set()
        second = polling.result(30)
    tables.armed = False
    assert [m.payload for m in second.messages] == [b"c", b"d"]
    stored = svc.subscriptions.get(SUB)
    assert (stored.position, stored.version) == (first.position, second.version)
    assert second.version == first.version + 1


def test_a_failed_commit_fails_the_poll_and_moves_nothing(
    setup: tuple[MessagingService, StalledRecords, _WatchedTables],
) -> None:
    svc, records, _tables = setup
    first = svc.subscriptions.read(SUB, limit=2)
    records.fail = StorageUnavailableError("the disk is gone")
    with pytest.raises(StorageUnavailableError):
        svc.subscriptions.read(
            SUB, start_from=first.position, limit=2, commit_version=first.version
        )
    records.fail = None
    stored = svc.subscriptions.get(SUB)
    assert (stored.position, stored.version) == (svc.subscriptions.get(SUB).position, first.version)
    assert stored.position != first.position
    with pytest.raises(BadVersionError):  # a stale version is refused before anything is written
        svc.subscriptions.read(
            SUB, start_from=first.position, limit=2, commit_version=first.version + 5
        )
    assert svc.subscriptions.get(SUB).version == first.version


class _StalledRecordWrites:
    """The service's store; while ``gate`` is closed, a synced write of subscription
    records waits (at most 20 s) for it (fault injection: a disk that stalls)."""

    def __init__(self, inner: KeyValueStore) -> None:
        self._inner = inner
        self.gate = threading.Event()
        self.gate.set()

    def table(self, name: bytes) -> Any:
        inner, gate = self._inner.table(name), self.gate

        class Table:
            def write(self, *args: Any, **kwargs: Any) -> Any:
                if name == SUBSCRIPTION_TABLE:
                    gate.wait(20)
                return inner.write(*args, **kwargs)

            def __getattr__(self, attr: str) -> Any:
                return getattr(inner, attr)

        return Table()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


def test_commits_riding_on_many_polls_share_one_synced_write(tmp_path: Path) -> None:
    kv = _StalledRecordWrites(LevelDBStore(tmp_path / "db"))
    records = KvSubscriptionStore(kv)
    svc = MessagingService(kv, subscription_store=records)
    consumers = 9
    try:
        svc.create_topic(T)
        svc.publish(StoreRequest.of(T, [f"m{i}" for i in range(20)]))
        subs = [SubscriptionId(T, f"c{i}") for i in range(consumers)]
        firsts = []
        for sub in subs:
            svc.subscriptions.create(sub, Preferences(Start.earliest()))
            firsts.append(svc.subscriptions.read(sub, limit=2))
        syncs = records.syncs
        # Given the records' synced write stalled
        kv.gate.clear()
        with ThreadPoolExecutor(consumers) as pool:
            # When many consumers' polls commit riding on their reads at once
            polling = [
                pool.submit(
                    svc.subscriptions.read,
                    sub,
                    start_from=first.position,
                    limit=2,
                    commit_version=first.version,
                )
                for sub, first in zip(subs, firsts, strict=True)
            ]
            # Then all but the one being written wait together for the next write
            for _ in range(1000):
                if records.gathered == consumers - 1:
                    break
                threading.Event().wait(0.01)
            gathered = records.gathered
            kv.gate.set()
            answers = [p.result(30) for p in polling]
        assert gathered == consumers - 1
        assert records.syncs - syncs == 2
        assert [a.version for a in answers] == [f.version + 1 for f in firsts]
    finally:
        kv.gate.set()
        svc.close()


def test_a_poll_with_a_commit_and_a_bad_limit_changes_nothing(
    setup: tuple[MessagingService, StalledRecords, _WatchedTables],
) -> None:
    svc, _records, _tables = setup
    first = svc.subscriptions.read(SUB, limit=2)
    for limit in (0, 10_001):
        with pytest.raises(TmsInvalidArgumentError):
            svc.subscriptions.read(
                SUB, start_from=first.position, limit=limit, commit_version=first.version
            )
    assert svc.subscriptions.get(SUB).version == first.version
