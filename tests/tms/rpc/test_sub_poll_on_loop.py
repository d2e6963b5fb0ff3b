"""A small subscription poll over the binary protocol is read on the loop's thread when
the store's reads are local and its read need not wait; a read that would wait
(``tms.subnowait``) goes to a worker, having done nothing (``tms.rpc.subs``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from tms.config import TmsConfig
from tms.errors import BadVersionError
from tms.model import StoreRequest, TopicId
from tms.rpc.backend import Backend
from tms.rpc.frames import rpc
from tms.rpc.ops import BY_NAME
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.memory import MemoryStore
from tms.store.subscriptions import KvSubscriptionStore, SubscriptionStore
from tms.subnowait import WouldWait, not_waiting
from tms.subscription import EARLIEST, Preferences, SubscriptionId

from .conftest import CountingPool, GatedStore

T = TopicId("ns", "t")
SUB = SubscriptionId(T, "s")
WAIT_S = 10.0


def service(
    store: KeyValueStore, *, commit_later_ms: int = 5, messages: int = 20
) -> MessagingService:
    svc = MessagingService(store, TmsConfig(commit_later_ms=commit_later_ms))
    svc.create_topic(T)
    if messages:
        svc.publish(StoreRequest(T, [b"m%d" % i for i in range(messages)]))
    svc.subscriptions.create(SUB, Preferences())
    return svc


def polls(
    svc: MessagingService,
    requests: list[dict[str, Any]],
    between: Callable[[int], None] = lambda i: None,
) -> tuple[list[Any], list[int]]:
    """Send each poll (``SubPollRequest`` fields) in turn, ``between(i)`` called in a
    thread while the i-th waits for its answer; their answers (or errors), and how many
    calls each handed to the worker pool."""

    async def scenario() -> tuple[list[Any], list[int]]:
        loop = asyncio.get_running_loop()
        answers: list[Any] = []
        counts: list[int] = []
        with CountingPool() as pool:
            backend = Backend(svc, pool, loop, max_wait_ms=30_000, max_poll_bytes=1 << 20)
            try:
                for i, fields in enumerate(requests):
                    before = len(pool.calls)
                    answered: asyncio.Future[Any] = loop.create_future()
                    req = rpc.SubPollRequest(ns="ns", topic="t", name="s", **fields)
                    try:
                        backend.dispatch(BY_NAME["sub_poll"], req, T, None, answered.set_result)
                    except Exception as exc:  # the answer, as the connection gives it
                        answered.set_result(exc)
                    await asyncio.to_thread(between, i)
                    answers.append(await asyncio.wait_for(answered, WAIT_S))
                    counts.append(len(pool.calls) - before)
            finally:
                backend.close()
        return answers, counts

    return asyncio.run(scenario())


@pytest.mark.parametrize("engine", ["memory", "leveldb"])
def test_small_subscription_polls_and_their_later_commits_read_on_the_loop(
    engine: str, tmp_path: Path
) -> None:
    store: KeyValueStore = MemoryStore() if engine == "memory" else LevelDBStore(tmp_path)
    svc = service(store)
    try:
        version = svc.subscriptions.get(SUB).version
        # When a poll of 10 reads from the position, and the next commits its position
        # riding on it (answered before its write), and a third the same while it waits
        first = polls(svc, [{"limit": 10}])[0][0]
        answers, counts = polls(
            svc,
            [
                {
                    "limit": 10,
                    "start": first.position,
                    "commit_version": version,
                    "commit_later": True,
                },
                {
                    "limit": 10,
                    "start": first.position,
                    "commit_version": version + 1,
                    "commit_later": True,
                    "wait_ms": 5_000,
                },
            ],
        )
        # Then every read answered from the loop's thread, no worker involved
        assert counts == [0, 0]
        assert list(first.payloads) == [b"m%d" % i for i in range(10)]
        assert [list(a.payloads) for a in answers] == [[b"m%d" % i for i in range(10, 20)]] * 2
        assert [a.version for a in answers] == [version + 1, version + 2]
        assert answers[0].durable_version == version
        # And the commits are durable once settled, in order
        svc.subscriptions.close()
        record = svc.subscriptions.store.read(SUB)
        assert record is not None
        assert record.version == version + 2
        assert record.data.state.position.to_bytes() == first.position
    finally:
        svc.close()


def test_a_durable_commit_still_reads_on_a_worker(tmp_path: Path) -> None:
    svc = service(LevelDBStore(tmp_path))
    try:
        version = svc.subscriptions.get(SUB).version
        start = EARLIEST.to_bytes()
        answers, counts = polls(svc, [{"limit": 10, "start": start, "commit_version": version}])
        # Then the answer waited for the write on a worker, and says it is durable
        assert counts == [1]
        assert answers[0].version == version + 1
        assert answers[0].durable_version is None
    finally:
        svc.close()


def test_a_poll_of_a_store_that_may_wait_on_another_process_reads_on_a_worker() -> None:
    svc = service(GatedStore(MemoryStore()))
    try:
        answers, counts = polls(svc, [{"limit": 10}])
        assert counts == [1]
        assert list(answers[0].payloads) == [b"m%d" % i for i in range(10)]
    finally:
        svc.close()


class _RemoteRecords:
    """The records' store of a subscription service, as one that does not say its reads
    are local (a coordination service's)."""

    def __init__(self, inner: KvSubscriptionStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "local_reads":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_poll_whose_records_are_not_local_reads_on_a_worker(tmp_path: Path) -> None:
    kv = LevelDBStore(tmp_path)
    records = cast(SubscriptionStore, _RemoteRecords(KvSubscriptionStore(kv)))
    svc = MessagingService(kv, subscription_store=records)
    try:
        svc.create_topic(T)
        svc.publish(StoreRequest(T, [b"m%d" % i for i in range(20)]))
        svc.subscriptions.create(SUB, Preferences())
        # When a small poll reads a subscription whose records live elsewhere
        answers, counts = polls(svc, [{"limit": 10}])
        # Then it is read on a worker, though the messages' store is local
        assert svc.local_reads()
        assert counts == [1]
        assert list(answers[0].payloads) == [b"m%d" % i for i in range(10)]
    finally:
        svc.close()


def test_a_read_that_would_wait_for_a_pending_write_goes_to_a_worker_having_done_nothing(
    tmp_path: Path,
) -> None:
    # Given a commit answered before its write, the write put off for a long time
    svc = service(LevelDBStore(tmp_path), commit_later_ms=60_000)
    try:
        version = svc.subscriptions.get(SUB).version
        start = EARLIEST.to_bytes()
        later = {"limit": 10, "start": start, "commit_version": version, "commit_later": True}
        (staged,), (on_worker,) = polls(svc, [later])
        assert on_worker == 0
        assert staged.version == version + 1
        assert staged.durable_version == version
        # When a poll committing nothing reads while that write is pending
        answers, counts = polls(svc, [{"limit": 10}])
        # Then its read went to a worker (it waits for the write: another operation on the
        # subscription sees only what is durable), and answered the durable record
        assert counts == [1]
        assert answers[0].version == version + 1
        assert answers[0].durable_version is None
        assert list(answers[0].payloads) == [b"m%d" % i for i in range(10)]
    finally:
        svc.close()


def test_a_later_commit_that_would_wait_is_not_staged_twice(tmp_path: Path) -> None:
    svc = service(LevelDBStore(tmp_path), commit_later_ms=60_000)
    try:
        subs = svc.subscriptions
        version = subs.get(SUB).version
        first = subs.read(SUB, limit=10)
        # Given a commit answered before its write, the write still pending
        staged = subs.read(
            SUB, start_from=first.position, limit=10, commit_version=version, commit_later=True
        )
        assert staged.version == version + 1
        with not_waiting(), pytest.raises(WouldWait):
            subs.read(SUB, limit=10)  # it would wait for the pending write: refused
        # A read committing from a version that is no longer current is refused either way
        with pytest.raises(BadVersionError):
            subs.read(
                SUB,
                start_from=first.position,
                limit=10,
                commit_version=version,
                commit_later=True,
            )
        subs.close()
        record = subs.store.read(SUB)
        assert record is not None
        assert record.version == version + 1
    finally:
        svc.close()


def test_a_later_commit_on_the_loop_that_finds_nothing_waits_without_committing_again(
    tmp_path: Path,
) -> None:
    svc = service(LevelDBStore(tmp_path), messages=0)
    try:
        version = svc.subscriptions.get(SUB).version
        start = EARLIEST.to_bytes()
        poll = {
            "limit": 10,
            "start": start,
            "commit_version": version,
            "commit_later": True,
            "wait_ms": int(WAIT_S * 1000),
        }

        def publish(_: int) -> None:
            svc.publish(StoreRequest(T, [b"new"]))

        # When a committing poll of an empty topic waits, and a publish wakes it
        answers, _ = polls(svc, [poll], between=publish)
        # Then it answers the message and the one commit it made (durable by then)
        assert list(answers[0].payloads) == [b"new"]
        assert answers[0].version == version + 1
        svc.subscriptions.close()
        record = svc.subscriptions.store.read(SUB)
        assert record is not None
        assert record.version == version + 1
    finally:
        svc.close()
