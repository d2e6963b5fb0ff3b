"""The queue tests' shared setup: ``QueueStore``, a real store with the faults and
counts they inject (fault injection around the key-value contract, ``tms.store.kv``),
and the fixtures ``clock``, ``store`` and ``svc`` (a service on it with the queue ``Q``),
(``tests/tms/conftest.py``; a module's own fixture of the same name goes first)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes import FakeClock
from tms.codec import keys
from tms.errors import StorageUnavailableError
from tms.model import TopicId
from tms.operations import Ticket
from tms.queue_leases import stored_leases
from tms.queues import QueueState
from tms.service import MessagingService
from tms.store.kv import KeyValueStore, WriteOp
from tms.store.queues import INDEX_TABLE, QUEUE_TABLE, QueueTables

Q = TopicId("ns", "jobs")
PROPS = {"kind": "queue", "lease_s": "10", "max_attempts": "3", "backoff_s": "2"}
START_MS = 1_700_000_000_000


def one_batch(svc: MessagingService, *tickets: Ticket[Any], topic: TopicId = Q) -> None:
    """The tickets written as one batch of the queue's writer."""

    async def scenario() -> None:
        await svc.submit_tickets(topic, list(tickets), asyncio.get_running_loop())

    asyncio.run(scenario())


def recount(queues: QueueTables, prefix: bytes) -> tuple[int, ...]:
    """A queue's messages per state, counted from its rows (a ready row that a lease
    record holds counts as leased: tms.queue_leases)."""
    _records, leases = stored_leases(queues, prefix)
    counts = [0] * len(QueueState)
    for row in queues.scan_rows(prefix):
        state = QueueState.LEASED if row.id in leases else row.state
        counts[state.counted_as] += 1
    return tuple(counts[: len(queues.counters(prefix))])


def prefix_of(svc: MessagingService, topic: TopicId = Q) -> bytes:
    """The key prefix of the queue's current generation."""
    return keys.topic_prefix(topic, svc.get_topic(topic).generation)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_MS)


@pytest.fixture
def store(kv: KeyValueStore) -> QueueStore:
    return QueueStore(kv)


@pytest.fixture
def svc(store: QueueStore, clock: FakeClock) -> Iterator[MessagingService]:
    """A service on ``store`` with the queue ``Q`` (settings ``PROPS``)."""
    service = MessagingService(store, clock=clock, rng=random.Random(7))
    service.create_topic(Q, PROPS)
    yield service
    service.close()


class QueueStore:
    """Wraps a real store: counts the queue index keys its scans hand out
    (``index_keys``); fails the next scan of the queue index from a key under
    ``fail_under``, once (a read error of the disk); fails the next read of the queue
    row with the key ``fail_get``, once; with ``lands_then_fails`` set, applies the next
    write and then reports it failed, once (the sync's answer lost). ``writes``: the
    ops of every write, in order."""

    def __init__(self, inner: KeyValueStore) -> None:
        self.inner = inner
        self.index_keys = 0
        self.fail_under: bytes | None = None
        self.fail_get: bytes | None = None
        self.lands_then_fails = False
        self.writes: list[list[WriteOp]] = []

    def table(self, name: bytes) -> Any:
        inner, store = self.inner.table(name), self
        if name == QUEUE_TABLE:

            class Rows:
                def get(self, key: bytes) -> bytes | None:
                    if store.fail_get is not None and key == store.fail_get:
                        store.fail_get = None
                        raise StorageUnavailableError("injected: the read failed")
                    return inner.get(key)

                def __getattr__(self, attr: str) -> Any:
                    return getattr(inner, attr)

            return Rows()
        if name != INDEX_TABLE:
            return inner

        class Table:
            def scan(self, start: bytes = b"", *args: Any, **kwargs: Any) -> Iterator[Any]:
                under = store.fail_under
                if under is not None and start.startswith(under):
                    store.fail_under = None
                    raise StorageUnavailableError("injected: the read failed")
                return store._counted(inner.scan(start, *args, **kwargs))

            def __getattr__(self, attr: str) -> Any:
                return getattr(inner, attr)

        return Table()

    def _counted(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self.index_keys += 1
            yield item

    def write(self, ops: Any, *args: Any, **kwargs: Any) -> None:
        self.writes.append(list(ops))
        self.inner.write(ops, *args, **kwargs)
        if self.lands_then_fails:
            self.lands_then_fails = False
            raise StorageUnavailableError("injected: the write's answer was lost")

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)
