"""A long poll woken by a write, and a small poll from its first read, read on the loop's
thread when the store's reads are local (LevelDB while up, memory), and on a worker
otherwise (``tms.rpc.backend``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.tms.helpers import tx
from tms.config import TmsConfig
from tms.errors import RequestTimeoutError
from tms.model import StoreRequest, TopicId
from tms.rpc.backend import Backend
from tms.rpc.config import LOOP_READ_ROWS
from tms.rpc.frames import rpc
from tms.rpc.ops import BY_NAME
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.memory import MemoryStore
from txn.codec import encode_transaction

from .conftest import CountingPool, GatedStore

T = TopicId("ns", "t")
WAIT_S = 10.0


def woken_poll(store: KeyValueStore) -> tuple[list[bytes], int]:
    """A poll that waits on an empty topic, woken by a publish: what it answered, and how
    many reads it handed to the worker pool."""
    svc = MessagingService(store)
    svc.create_topic(T)

    async def scenario() -> tuple[list[bytes], int]:
        loop = asyncio.get_running_loop()
        with CountingPool() as pool:
            backend = Backend(svc, pool, loop, max_wait_ms=30_000, max_poll_bytes=1 << 20)
            answered: asyncio.Future[Any] = loop.create_future()
            req = rpc.PollRequest(ns="ns", topic="t", wait_ms=int(WAIT_S * 1000))
            backend.dispatch(BY_NAME["poll"], req, T, None, answered.set_result)
            try:
                while not pool.calls:
                    await asyncio.sleep(0.001)
                await asyncio.wrap_future(pool.calls[0])  # found nothing: it waits
                await asyncio.to_thread(svc.publish, StoreRequest(T, [b"new"]))
                response = await asyncio.wait_for(answered, WAIT_S)
            finally:
                backend.close()
            return list(response.payloads), len(pool.calls)

    try:
        return asyncio.run(scenario())
    finally:
        svc.close()


@pytest.mark.parametrize("engine", ["memory", "leveldb"])
def test_a_woken_poll_reads_on_the_loop_when_reads_are_local(engine: str, tmp_path: Path) -> None:
    store: KeyValueStore = MemoryStore() if engine == "memory" else LevelDBStore(tmp_path)
    # When a waiting poll is woken by a publish
    payloads, worker_reads = woken_poll(store)
    # Then it answers the message, having read on a worker only before it waited
    assert payloads == [b"new"]
    assert worker_reads == 1


def test_a_woken_poll_reads_on_a_worker_when_reads_may_wait_on_another_process() -> None:
    # Given a store that does not say its reads are local (as a remote engine's)
    payloads, worker_reads = woken_poll(GatedStore(MemoryStore()))
    # Then the woken read goes to a worker too
    assert payloads == [b"new"]
    assert worker_reads == 2


def test_a_closed_memory_store_and_a_down_leveldb_handle_do_not_read_locally(
    tmp_path: Path,
) -> None:
    memory = MemoryStore()
    assert memory.local_reads
    memory.close()
    assert not memory.local_reads
    leveldb = LevelDBStore(tmp_path)
    assert leveldb.local_reads
    leveldb.close()
    assert not leveldb.local_reads


def small_polls(store: KeyValueStore, *, deadline: float | None = None) -> tuple[list[Any], int]:
    """Two polls of 10 of a topic of 20 messages, one that does not wait and one that
    does (it finds messages at once): their answers (the response or the error), and how
    many reads they handed to the worker pool."""
    svc = MessagingService(store)
    svc.create_topic(T)
    svc.publish(StoreRequest(T, [b"m%d" % i for i in range(20)]))

    async def scenario() -> tuple[list[Any], int]:
        loop = asyncio.get_running_loop()
        with CountingPool() as pool:
            backend = Backend(svc, pool, loop, max_wait_ms=30_000, max_poll_bytes=1 << 20)
            answers: list[Any] = []
            try:
                for wait_ms in (0, int(WAIT_S * 1000)):
                    answered: asyncio.Future[Any] = loop.create_future()
                    req = rpc.PollRequest(ns="ns", topic="t", limit=10, wait_ms=wait_ms)
                    try:
                        backend.dispatch(BY_NAME["poll"], req, T, deadline, answered.set_result)
                    except Exception as exc:  # the answer, as the connection gives it
                        answered.set_result(exc)
                    answers.append(await asyncio.wait_for(answered, WAIT_S))
            finally:
                backend.close()
            return answers, len(pool.calls)

    try:
        return asyncio.run(scenario())
    finally:
        svc.close()


@pytest.mark.parametrize("engine", ["memory", "leveldb"])
def test_a_small_poll_reads_on_the_loop_when_reads_are_local(engine: str, tmp_path: Path) -> None:
    store: KeyValueStore = MemoryStore() if engine == "memory" else LevelDBStore(tmp_path)
    # When a poll of 10 asks a topic holding 20, with and without waiting
    answers, worker_reads = small_polls(store)
    # Then both answer the first 10, read on the loop's thread
    assert [list(a.payloads) for a in answers] == [[b"m%d" % i for i in range(10)]] * 2
    assert worker_reads == 0


def test_a_small_poll_reads_on_a_worker_when_reads_may_wait_on_another_process() -> None:
    answers, worker_reads = small_polls(GatedStore(MemoryStore()))
    assert [list(a.payloads) for a in answers] == [[b"m%d" % i for i in range(10)]] * 2
    assert worker_reads == 2


def test_a_small_poll_past_its_deadline_is_dropped_unread() -> None:
    # Given polls whose deadline has passed before they are handled
    answers, worker_reads = small_polls(MemoryStore(), deadline=time.monotonic() - 1)
    # Then each answers the timeout, read on no thread
    assert [type(a) for a in answers] == [RequestTimeoutError] * 2
    assert worker_reads == 0


def test_a_small_poll_that_would_pass_many_rows_reads_on_a_worker() -> None:
    # Given a topic whose first entries are more than a loop's read may pass, all of an
    # invalid transaction's (a transactional reader skips them), then 20 messages
    svc = MessagingService(MemoryStore(), TmsConfig(tx_max_lifetime_s=10**10))
    svc.create_topic(T)
    svc.publish(StoreRequest(T, [b"x"] * (LOOP_READ_ROWS + 10), tx_write_pointer=5))
    svc.publish(StoreRequest(T, [b"m%d" % i for i in range(20)]))
    reader = encode_transaction(tx(100, 101, invalids=(5,)))

    async def scenario() -> tuple[list[Any], int]:
        loop = asyncio.get_running_loop()
        with CountingPool() as pool:
            backend = Backend(svc, pool, loop, max_wait_ms=30_000, max_poll_bytes=1 << 20)
            answers = []
            try:
                for wait_ms in (None, int(WAIT_S * 1000)):
                    answered: asyncio.Future[Any] = loop.create_future()
                    req = rpc.PollRequest(
                        ns="ns", topic="t", limit=10, wait_ms=wait_ms, transaction=reader
                    )
                    backend.dispatch(BY_NAME["poll"], req, T, None, answered.set_result)
                    answers.append(await asyncio.wait_for(answered, WAIT_S))
            finally:
                backend.close()
            return answers, len(pool.calls)

    try:
        # When a transactional poll of 10 reads it, with and without waiting
        answers, worker_reads = asyncio.run(scenario())
    finally:
        svc.close()
    # Then each answers the first 10 messages, read on a worker (the loop's read stopped)
    assert [list(a.payloads) for a in answers] == [[b"m%d" % i for i in range(10)]] * 2
    assert worker_reads == 2
