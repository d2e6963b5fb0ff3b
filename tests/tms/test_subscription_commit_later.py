"""A commit riding on a poll answered before it is durable (``commit_later``): the
answer says which version is durable; the next poll's commit goes on from the answer's
version while the write is under way; every other operation waits for the write; a
failed write loses the commit and the next commit from its version is refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.tms.test_subscription_commit import SUB, T, _StalledRecordWrites
from tms.errors import BadVersionError, PositionOutOfRangeError, StorageUnavailableError
from tms.ids import MessageId
from tms.model import StoreRequest
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.store.subscriptions import SUBSCRIPTION_TABLE, KvSubscriptionStore
from tms.subscription import Preferences, Start


class _FailingRecordWrites(_StalledRecordWrites):
    """A stalling store whose stalled write of records then fails, writing nothing, with
    ``fail`` when it is set."""

    fail: Exception | None = None

    def table(self, name: bytes) -> Any:
        inner, outer = super().table(name), self

        class Table:
            def write(self, *args: Any, **kwargs: Any) -> Any:
                if name == SUBSCRIPTION_TABLE:
                    outer.gate.wait(20)
                    if outer.fail is not None:
                        raise outer.fail
                return inner.write(*args, **kwargs)

            def __getattr__(self, attr: str) -> Any:
                return getattr(inner, attr)

        return Table()


@pytest.fixture
def stalled(tmp_path: Path) -> Iterator[tuple[MessagingService, _FailingRecordWrites]]:
    kv = _FailingRecordWrites(LevelDBStore(tmp_path / "db"))
    svc = MessagingService(kv, subscription_store=KvSubscriptionStore(kv))
    svc.create_topic(T)
    svc.publish(StoreRequest.of(T, ["a", "b", "c", "d", "e", "f"]))
    svc.subscriptions.create(SUB, Preferences(Start.earliest()))
    yield svc, kv
    kv.gate.set()
    svc.close()


def test_a_poll_answers_before_its_commit_is_durable_and_says_so(
    stalled: tuple[MessagingService, _FailingRecordWrites], tmp_path: Path
) -> None:
    svc, kv = stalled
    first = svc.subscriptions.read(SUB, limit=2)
    assert first.durable_version in (None, first.version)
    # Given the records' synced writes stalled
    kv.gate.clear()
    # When a poll commits the first batch riding on it, not waiting for the write
    second = svc.subscriptions.read(
        SUB, start_from=first.position, limit=2, commit_version=first.version, commit_later=True
    )
    # Then it answers the next messages at once, and says its commit is not durable yet
    assert [m.payload for m in second.messages] == [b"c", b"d"]
    assert second.version == first.version + 1
    assert second.durable_version == first.version
    # and the next poll's commit goes on from the version answered
    third = svc.subscriptions.read(
        SUB, start_from=second.position, limit=2, commit_version=second.version, commit_later=True
    )
    assert [m.payload for m in third.messages] == [b"e", b"f"]
    assert (third.version, third.durable_version) == (second.version + 1, first.version)
    # while a commit from a stale version is refused and changes nothing
    with pytest.raises(BadVersionError):
        svc.subscriptions.read(
            SUB, start_from=second.position, commit_version=second.version, commit_later=True
        )
    # and anything else on the subscription waits for the write
    with ThreadPoolExecutor(1) as pool:
        getting = pool.submit(svc.subscriptions.get, SUB)
        assert not threading.Event().wait(0.3) and not getting.done()
        kv.gate.set()
        stored = getting.result(30)
    assert (stored.position, stored.version) == (second.position, third.version)
    # and the next answer says it is durable
    fourth = svc.subscriptions.read(
        SUB, start_from=third.position, commit_version=third.version, commit_later=True
    )
    assert fourth.durable_version == third.version
    svc.subscriptions.get(SUB)  # waits for the fourth's write
    svc.close()
    again = MessagingService(LevelDBStore(tmp_path / "db"))
    try:
        stored = again.subscriptions.get(SUB)
        assert (stored.position, stored.version) == (third.position, fourth.version)
    finally:
        again.close()


def test_a_commit_whose_write_fails_after_its_answer_is_lost_and_refused_after(
    stalled: tuple[MessagingService, _FailingRecordWrites],
) -> None:
    svc, kv = stalled
    first = svc.subscriptions.read(SUB, limit=2)
    before = svc.subscriptions.get(SUB)
    kv.gate.clear()
    kv.fail = StorageUnavailableError("the disk is gone")
    second = svc.subscriptions.read(
        SUB, start_from=first.position, limit=2, commit_version=first.version, commit_later=True
    )
    assert second.durable_version == first.version < second.version
    kv.gate.set()
    stored = svc.subscriptions.get(SUB)  # once the write failed
    kv.fail = None
    # Then the commit answered before its write is not there
    assert (stored.position, stored.version) == (before.position, first.version)
    # and the next commit from the version answered is refused, changing nothing
    with pytest.raises(BadVersionError):
        svc.subscriptions.read(
            SUB, start_from=second.position, commit_version=second.version, commit_later=True
        )
    assert svc.subscriptions.get(SUB).version == first.version
    # while a commit from the version read again is taken
    again = svc.subscriptions.read(
        SUB, start_from=second.position, commit_version=first.version, commit_later=True
    )
    assert again.version == first.version + 1
    assert svc.subscriptions.get(SUB).position == second.position


def test_a_later_commit_is_checked_against_the_topics_end_whatever_its_read_found(
    tmp_path: Path,
) -> None:
    # Given a topic of 6 messages, read to its end
    kv = LevelDBStore(tmp_path / "db")
    svc = MessagingService(kv, subscription_store=KvSubscriptionStore(kv))
    try:
        svc.create_topic(T)
        svc.publish(StoreRequest.of(T, ["a", "b", "c", "d", "e", "f"]))
        svc.subscriptions.create(SUB, Preferences(Start.earliest()))
        subs = svc.subscriptions
        everything = subs.read(SUB, limit=10)
        end = everything.position
        version = everything.version
        beyond = MessageId(end.publish_ms + 1, 0)
        # When a poll commits a position past the last entry (its read finds nothing)
        with pytest.raises(PositionOutOfRangeError):
            subs.read(SUB, start_from=beyond, limit=2, commit_version=version, commit_later=True)
        # Then nothing was staged: the version read is still the one to commit from
        inside = subs.read(
            SUB,
            start_from=everything.start,
            limit=2,
            commit_version=version,
            commit_later=True,
        )
        assert [m.payload for m in inside.messages] == [b"a", b"b"]
        assert inside.version == version + 1
        # And a commit of the end itself (nothing after it to read) is accepted
        at_end = subs.read(
            SUB, start_from=end, limit=2, commit_version=inside.version, commit_later=True
        )
        assert at_end.messages == []
        assert at_end.version == version + 2
        subs.close()
        record = subs.store.read(SUB)
        assert record is not None
        assert (record.version, record.data.state.position) == (version + 2, end)
    finally:
        svc.close()
