"""``MessagingService.submit_async``: the writes an event loop submits in one turn go out
as one batch, those submitted while a batch is written go out as the next, another
topic is never held back, each operation keeps its own outcome, and one still queued
past its deadline is dropped unwritten."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tms.errors import RequestTimeoutError, TmsError, TmsInvalidArgumentError, TopicNotFoundError
from tms.fetcher import FetchRequest
from tms.model import RollbackDetail, StoreRequest, TopicId
from tms.operations import Publish, Store, Ticket
from tms.service import MessagingService
from tms.store.kv import Fence, Update, WriteOp
from tms.store.memory import MemoryStore

T = TopicId("ns", "t")
WAIT_S = 30.0


class GatedStore(MemoryStore):
    """A memory store whose writes can be held, and its reads (fault injection: a slow
    disk); ``waiting`` and ``reading`` tell that one was."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()
        self.reads = threading.Event()
        self.reads.set()
        self.reading = threading.Event()

    def table(self, name: bytes) -> Any:
        inner, store = super().table(name), self

        class Table:
            def __getattr__(self, attr: str) -> Any:
                if not store.reads.is_set():
                    store.reading.set()
                    assert store.reads.wait(WAIT_S)
                return getattr(inner, attr)

        return Table()

    def write(
        self,
        ops: Sequence[WriteOp],
        *,
        sync: bool = True,
        epoch: int | None = None,
        fence: Fence | None = None,
        updates: Sequence[Update] = (),
        new_keys: bool = False,
    ) -> None:
        self.waiting.set()
        assert self.open.wait(WAIT_S)
        super().write(
            ops,
            sync=sync,
            epoch=epoch,
            fence=fence,
            updates=updates,
            new_keys=new_keys,
        )


@pytest.fixture
def store() -> GatedStore:
    return GatedStore()


@pytest.fixture
def svc(store: GatedStore) -> Iterator[MessagingService]:
    service = MessagingService(store)
    service.create_topic(T)
    store.waiting.clear()  # the topic's creation wrote through the store: not a publish
    yield service
    service.close()


def batches(svc: MessagingService) -> tuple[float, float]:
    """(written batches, operations in them) so far."""
    m = svc.metrics
    return (
        m.value("tms_writer_batch_operations_count"),
        m.value("tms_writer_batch_operations_sum"),
    )


def _publish(svc: MessagingService, payload: str, topic: TopicId = T) -> asyncio.Task[object]:
    return asyncio.ensure_future(svc.submit_async(Publish(StoreRequest.of(topic, [payload]))))


def test_one_turn_is_one_batch_and_outcomes_are_separate(svc: MessagingService) -> None:
    async def scenario() -> list[object]:
        tasks = [_publish(svc, f"m{i}") for i in range(10)]
        not_tx = Store(StoreRequest.of(T, ["not tx"]))
        tasks.insert(3, asyncio.ensure_future(svc.submit_async(not_tx)))
        return await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())
    outcomes = asyncio.run(scenario())
    assert batches(svc) == (2, 22)  # each run: one batch of 11
    assert isinstance(outcomes[3], TmsInvalidArgumentError)
    assert [o for i, o in enumerate(outcomes) if i != 3] == [None] * 10
    stored = [m.payload for m in svc.fetch(T, FetchRequest()).messages]
    assert stored == [f"m{i}".encode() for i in range(10)] * 2


def test_operations_submitted_during_a_write_are_the_next_batch(
    svc: MessagingService, store: GatedStore
) -> None:
    other = TopicId("ns", "other")
    svc.create_topic(other)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        # Given a first write held on its way to the store (the topics' creation wrote
        # through the store too: only the publish's write counts)
        store.open.clear()
        store.waiting.clear()
        first = _publish(svc, "a")
        assert await loop.run_in_executor(None, store.waiting.wait, WAIT_S)
        # When more are submitted meanwhile
        later = [_publish(svc, x) for x in "bcde"]
        missing = _publish(svc, "?", TopicId("ns", "missing"))
        with pytest.raises(TopicNotFoundError):
            await missing
        await asyncio.sleep(0.01)
        assert batches(svc) == (0, 0) and not first.done()
        store.open.set()
        # Then they go out together once it is done, and in order
        await asyncio.gather(first, *later)
        assert batches(svc) == (2, 5)
        # Idle again: the next one goes out by itself; another topic is never held back
        store.open.clear()
        held = _publish(svc, "f")
        assert await loop.run_in_executor(None, store.waiting.wait, WAIT_S)
        store.waiting.clear()
        store.open.set()
        await asyncio.gather(held, _publish(svc, "z", other))

    asyncio.run(scenario())
    assert batches(svc) == (4, 7)
    assert [m.payload for m in svc.fetch(T, FetchRequest()).messages] == [
        b"a",
        b"b",
        b"c",
        b"d",
        b"e",
        b"f",
    ]
    assert [m.payload for m in svc.fetch(other, FetchRequest()).messages] == [b"z"]


def test_calls_made_while_the_writer_opens_are_written_in_call_order(
    svc: MessagingService, store: GatedStore
) -> None:
    u = TopicId("ns", "u")
    svc.create_topic(u)  # its writer is opened by the first write
    calls: list[asyncio.Future[None]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ended = loop.create_future()

        def call() -> None:
            ticket = Ticket(Publish(StoreRequest.of(u, [str(len(calls))])))
            calls.append(svc.submit_tickets(u, [ticket], loop))

        def turn() -> None:
            # A connection pipelining one publish per turn of the loop, before, while
            # and after the writer opens, until the first call was written
            call()
            if len(calls) >= 3 and store.reading.is_set():
                store.reads.set()
            if calls[0].done() or len(calls) > 100_000:
                ended.set_result(None)
            else:
                loop.call_soon(turn)

        # Given the writer's opening held at its first read of the store
        store.reads.clear()
        turn()
        await ended
        await asyncio.gather(*calls)

    asyncio.run(scenario())
    # Then the calls were written in the order they were made
    written = [int(m.payload) for m in svc.fetch(u, FetchRequest(limit=10**6)).messages]
    assert written == list(range(len(calls)))
    assert len(calls) > 3


def test_results_are_typed_per_operation(svc: MessagingService) -> None:
    async def scenario() -> RollbackDetail | None:
        request = StoreRequest.of(T, ["in tx"], tx_write_pointer=svc.now_ms() * 1_000_000)
        return await svc.submit_async(Publish(request))

    detail = asyncio.run(scenario())
    assert isinstance(detail, RollbackDetail) and detail.start_seq == 0


def test_a_closed_service_refuses_writes_with_its_own_error(store: GatedStore) -> None:
    svc = MessagingService(store)
    svc.create_topic(T)
    svc.close()
    with pytest.raises(TmsError, match="closed"):
        svc.publish(StoreRequest.of(T, ["late"]))

    async def scenario() -> None:
        with pytest.raises(TmsError, match="closed"):
            await svc.submit_async(Publish(StoreRequest.of(T, ["late"])))

    asyncio.run(scenario())


def test_an_operation_queued_past_its_deadline_is_dropped_unwritten(
    svc: MessagingService, store: GatedStore
) -> None:
    async def scenario() -> list[object]:
        # Given a batch held by a slow disk
        store.open.clear()
        first = _publish(svc, "first")
        await asyncio.to_thread(store.waiting.wait, WAIT_S)
        # When an operation with a deadline waits behind it past that deadline
        late = Publish(StoreRequest.of(T, ["late"]))
        queued = asyncio.ensure_future(svc.submit_async(late, deadline=time.monotonic() + 0.05))
        in_time = Publish(StoreRequest.of(T, ["in time"]))
        kept = asyncio.ensure_future(svc.submit_async(in_time, deadline=time.monotonic() + 60))
        await asyncio.sleep(0.2)
        store.open.set()
        return await asyncio.gather(first, queued, kept, return_exceptions=True)

    # Then it fails saying so, and is not written; the others are
    first, late, kept = asyncio.run(scenario())
    assert isinstance(late, RequestTimeoutError)
    assert first is None and kept is None
    assert [m.payload for m in svc.fetch(T).messages] == [b"first", b"in time"]
