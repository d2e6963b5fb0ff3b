"""``WriteBatcher``: operations queued in one turn of the loop go out as one batch, those
queued while a batch is written go out as the next, and each keeps its own outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tms.errors import TmsInvalidArgumentError, TopicNotFoundError
from tms.fetcher import FetchRequest
from tms.http.batcher import WriteBatcher
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService, WriteOperation
from tms.store.memory import MemoryStore

T = TopicId("ns", "t")


@pytest.fixture
def svc() -> Iterator[MessagingService]:
    service = MessagingService(MemoryStore())
    service.create_topic(T)
    yield service
    service.close()


def _recording(svc: MessagingService, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches the service is given (the real ``write`` still runs)."""
    sizes: list[int] = []
    real = svc.write

    def write(topic: TopicId, operations: Sequence[WriteOperation]) -> list[Any]:
        sizes.append(len(operations))
        return real(topic, operations)

    monkeypatch.setattr(svc, "write", write)
    return sizes


def _publish(batcher: WriteBatcher, payload: str, topic: TopicId = T) -> asyncio.Future[Any]:
    return batcher.submit(topic, "publish", StoreRequest.of(topic, [payload]))


def test_one_turn_is_one_batch_and_outcomes_are_separate(
    svc: MessagingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _recording(svc, monkeypatch)

    async def scenario() -> list[Any]:
        with ThreadPoolExecutor(2) as pool:
            batcher = WriteBatcher(svc, pool, asyncio.get_running_loop())
            futures = [_publish(batcher, f"m{i}") for i in range(10)]
            futures.insert(3, batcher.submit(T, "store", StoreRequest.of(T, ["not tx"])))
            return await asyncio.gather(*futures, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert sizes == [11]
    assert isinstance(outcomes[3], TmsInvalidArgumentError)
    assert [o for i, o in enumerate(outcomes) if i != 3] == [None] * 10
    stored = [m.payload for m in svc.fetch(T, FetchRequest()).messages]
    assert stored == [f"m{i}".encode() for i in range(10)]


def test_operations_queued_during_a_write_are_the_next_batch(
    svc: MessagingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _recording(svc, monkeypatch)
    other = TopicId("ns", "other")
    svc.create_topic(other)

    async def scenario() -> None:
        with ThreadPoolExecutor(4) as pool:
            batcher = WriteBatcher(svc, pool, asyncio.get_running_loop())
            first = _publish(batcher, "a")
            await asyncio.sleep(0)  # the first batch has been handed to a worker
            later = [_publish(batcher, x) for x in "bcde"]
            elsewhere = _publish(batcher, "z", other)  # another topic is not held back
            missing = _publish(batcher, "?", TopicId("ns", "missing"))
            await asyncio.gather(first, *later, elsewhere)
            with pytest.raises(TopicNotFoundError):
                await missing
            # Idle again: the next operation goes out by itself.
            await _publish(batcher, "f")

    asyncio.run(scenario())
    assert sorted(sizes) == [1, 1, 1, 1, 4]
    assert sizes[0] == 1 and sizes[-1] == 1
    assert [m.payload for m in svc.fetch(T, FetchRequest()).messages] == [
        b"a",
        b"b",
        b"c",
        b"d",
        b"e",
        b"f",
    ]
