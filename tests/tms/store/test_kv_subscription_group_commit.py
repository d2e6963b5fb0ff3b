"""``KvSubscriptionStore``'s group commit: changes that arrive while a write is under
way share the next synced write, each acknowledged only once it is durable, and the
compare-and-set checks see the changes accepted before them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tms.errors import BadVersionError, StorageUnavailableError
from tms.ids import MessageId
from tms.model import TopicId
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.subscriptions import SUBSCRIPTION_TABLE, KvSubscriptionStore
from tms.subscription import (
    Preferences,
    Start,
    SubscriptionData,
    SubscriptionId,
    SubscriptionState,
)

TOPIC = TopicId("ns", "t")


def data(position: int) -> SubscriptionData:
    return SubscriptionData(
        Preferences(Start.earliest()), SubscriptionState(MessageId(position, 0), 1, 7, 1_000)
    )


def sub(name: str) -> SubscriptionId:
    return SubscriptionId(TOPIC, name)


class GatedKv:
    """Fault injection: the subscription table's writes are counted, and while ``gate``
    is closed each waits for it (``entered`` set), then fails with ``fail`` if set."""

    def __init__(self, inner: KeyValueStore) -> None:
        self._inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.writes = 0
        self.fail: Exception | None = None

    def table(self, name: bytes) -> Any:
        inner, gated = self._inner.table(name), self

        class Table:
            def write(
                self, puts: Sequence[Any] = (), deletes: Sequence[Any] = (), **kw: Any
            ) -> None:
                if name == SUBSCRIPTION_TABLE:
                    gated.writes += 1
                    gated.entered.set()
                    gated.gate.wait(20)
                    if gated.fail is not None:
                        raise gated.fail
                inner.write(puts, deletes, **kw)

            def __getattr__(self, attr: str) -> Any:
                return getattr(inner, attr)

        return Table()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "db"


def _wait_for(check: Any) -> None:
    until = time.monotonic() + 10
    while not check() and time.monotonic() < until:
        time.sleep(0.005)


def _run(calls: list[Any]) -> tuple[list[threading.Thread], dict[int, Any]]:
    results: dict[int, Any] = {}

    def call(i: int, fn: Any) -> None:
        try:
            results[i] = fn()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i, fn)) for i, fn in enumerate(calls)]
    for thread in threads:
        thread.start()
    return threads, results


def _held_write(
    db: Path, names: list[str], fail: Exception | None = None
) -> tuple[LevelDBStore, GatedKv, KvSubscriptionStore, list[threading.Thread], dict[int, Any]]:
    """A store with records ``names`` (version 1), and a write of the first one under
    way, held at the medium (then failing with ``fail``)."""
    kv = LevelDBStore(db)
    gated = GatedKv(kv)
    store = KvSubscriptionStore(gated)
    for name in names:
        store.create(sub(name), data(0))
    gated.gate.clear()
    gated.entered.clear()
    gated.fail = fail
    first, first_result = _run([lambda: store.write(sub(names[0]), data(1), 1)])
    assert gated.entered.wait(10)
    return kv, gated, store, first, first_result


def test_changes_arriving_during_a_write_share_the_next_one_and_are_all_durable(
    db: Path,
) -> None:
    # Given a write under way (held at the medium)
    names = [f"s{i}" for i in range(8)]
    kv, gated, store, first, first_result = _held_write(db, names)
    writes_before = gated.writes - 1
    # When 7 more subscriptions commit, one of them twice (the second from the version
    # the first gives), while it is written
    calls: list[Any] = [(lambda n=name: store.write(sub(n), data(2), 1)) for name in names[1:]]
    calls.append(lambda: store.write(sub("s0"), data(3), 2))  # on top of the one under way
    threads, results = _run(calls)
    _wait_for(lambda: store.gathered == 8)
    # and a commit from a stale version is refused at once, while the write waits
    with pytest.raises(BadVersionError):
        store.write(sub("s0"), data(9), 1)
    assert all(t.is_alive() for t in threads)  # nothing acknowledged yet
    gated.gate.set()
    for thread in first + threads:
        thread.join(20)
    # Then every commit was acknowledged with its version, in two writes in all
    assert first_result == {0: 2}
    assert results == {i: 2 for i in range(7)} | {7: 3}
    assert gated.writes - writes_before == 2
    assert store.syncs >= 2 and store.changes >= 9
    # and each is there after a restart
    kv.close()
    again = KvSubscriptionStore(LevelDBStore(db))
    assert again.read(sub("s0")).data == data(3)  # type: ignore[union-attr]
    for name in names[1:]:
        record = again.read(sub(name))
        assert record is not None and (record.version, record.data) == (2, data(2))


def test_a_failed_write_fails_every_change_that_shared_it_and_writes_none_of_them(
    db: Path,
) -> None:
    kv, gated, store, threads, results = _held_write(
        db, ["a", "b"], StorageUnavailableError("disk full")
    )
    # a change checked against the one under way, and one on another record
    more, more_results = _run(
        [lambda: store.write(sub("a"), data(2), 2), lambda: store.write(sub("b"), data(2), 1)]
    )
    _wait_for(lambda: store.gathered == 2)
    gated.gate.set()
    for thread in threads + more:
        thread.join(20)
    assert isinstance(results[0], StorageUnavailableError)
    assert all(isinstance(r, StorageUnavailableError) for r in more_results.values())
    gated.fail = None
    kv.close()
    again = KvSubscriptionStore(LevelDBStore(db))
    assert again.read(sub("a")).version == 1  # type: ignore[union-attr]
    assert again.read(sub("b")).version == 1  # type: ignore[union-attr]
