"""``tms.aio.Queue`` and ``tms.aio.Worker`` against the real servers: a queue's calls over
the binary protocol, enqueue and ack inside a producer's transaction (committed,
aborted, and with a write whose answer is lost), and the worker helper (ack on success,
nack on exception, bounded concurrency, clean stop)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack, running_stack
from tms.aio import AsyncMessagingClient, Producer, Queue, Worker
from tms.codec import keys
from tms.errors import ServiceUnavailableError
from tms.model import TopicId
from tms.queues import AckOutcome, EnqueueItem, QueueMessage

Q = TopicId("ns", "aio-jobs")
DONE = TopicId("ns", "aio-done")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path) as s:
        s.messaging.create_topic(Q, {"kind": "queue", "lease_s": "60", "backoff_s": "60"})
        s.messaging.create_topic(DONE)
        yield s


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def counts(stack: Stack) -> tuple[int, int, int, int, int]:
    """(pending, ready, leased, acked, scheduled) of the queue."""
    s = stack.service.queue_stats(Q)
    return s.pending, s.ready, s.leased, s.acked, s.scheduled


def stored_counts(stack: Stack) -> tuple[int, ...]:
    """Messages per state as stored, without the housekeeping a stats call does (which
    would settle committed transactions' work by itself)."""
    generation = stack.service.get_topic(Q).generation
    return stack.tables.queues.counters(keys.topic_prefix(Q, generation))


def test_enqueue_receive_ack_nack(stack: Stack) -> None:
    async def main() -> None:
        async with AsyncMessagingClient(stack.rpc_url) as client:
            queue = Queue(client, Q)
            ids = await queue.enqueue([b"a", EnqueueItem(b"b", key="k", priority=1)])
            again = await queue.enqueue([EnqueueItem(b"b", key="k")])
            assert again[0].id == ids[1].id and again[0].duplicate
            got = await queue.receive(5)
            assert [(m.payload, m.attempt) for m in got] == [(b"a", 1), (b"b", 1)]
            assert await queue.ack([got[0]]) == [AckOutcome.ACKED]
            assert await queue.nack([got[1]], delay_s=0) == [AckOutcome.RETURNED]
            [back] = await queue.receive(5)
            assert (back.payload, back.attempt) == (b"b", 2)
            waiting = asyncio.ensure_future(queue.receive(1, wait_s=30))
            await asyncio.sleep(0.2)  # let it wait (if it had not started, it finds it)
            await queue.enqueue([b"late"])
            assert [m.payload for m in await waiting] == [b"late"]
            stats = await queue.stats()
            assert (stats.acked, stats.leased) == (1, 2)

    run(main())


def test_a_committed_transaction_delivers_its_enqueues_and_finishes_its_acks(
    stack: Stack,
) -> None:
    stack.messaging.queue(Q).enqueue([b"job"])

    async def main() -> None:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            queue = Queue(producer, Q)
            [job] = await queue.receive(1)
            async with producer.transaction():
                await producer.publish(DONE, b"did " + job.payload)
                assert await queue.ack([job]) == [AckOutcome.PENDING]
                await queue.enqueue([b"next"])
                # Then neither is visible while the transaction runs
                assert counts(stack)[:4] == (1, 0, 1, 0)
                assert await Queue(producer.client, Q).receive(5) == []
            # settled at once after the commit: no waiting for the service to find out
            assert stored_counts(stack) == (0, 0, 1, 0, 1, 0)
            assert counts(stack)[:4] == (0, 1, 0, 1)
            [nxt] = await queue.receive(1)
            assert nxt.payload == b"next"

    run(main())


def test_an_aborted_transactions_ack_leaves_the_message_leased(stack: Stack) -> None:
    stack.messaging.queue(Q).enqueue([b"job"])

    async def main() -> QueueMessage:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            queue = Queue(producer, Q)
            [job] = await queue.receive(1)
            with pytest.raises(RuntimeError, match="failed"):
                async with producer.transaction():
                    assert await queue.ack([job]) == [AckOutcome.PENDING]
                    await queue.enqueue([b"never"])
                    raise RuntimeError("the work failed")
            return job

    job = run(main())
    # Then the ack is undone and the enqueue gone: the message is leased, not acked
    assert counts(stack)[:4] == (0, 0, 1, 0)
    # and no transaction's ack holds it: its own receipt can still finish it
    assert stack.messaging.queue(Q).ack([job]) == [AckOutcome.ACKED]
    # the transaction was aborted (proven rollback), not invalidated
    assert stack.tx.invalid_size() == 0


def test_an_enqueue_whose_answer_is_lost_invalidates_the_transaction(
    stack: Stack, monkeypatch: Any
) -> None:
    async def main() -> None:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            queue = Queue(producer, Q)
            real = producer.client.enqueue_queue

            async def lost(*args: Any, **kwargs: Any) -> Any:
                await real(*args, **kwargs)  # stored, but the answer never arrives
                raise ServiceUnavailableError("the answer was lost: outcome unknown")

            monkeypatch.setattr(producer.client, "enqueue_queue", lost)
            with pytest.raises(ServiceUnavailableError):
                async with producer.transaction():
                    await queue.enqueue([b"maybe"])

    run(main())
    # Then the transaction is invalid, and its pending enqueue never becomes deliverable
    assert stack.tx.invalid_size() == 1
    assert counts(stack)[1:3] == (0, 0)
    assert stack.messaging.queue(Q).receive(5) == []


def test_the_worker_acks_successes_nacks_failures_within_its_concurrency(
    stack: Stack,
) -> None:
    stack.messaging.queue(Q).enqueue([f"job-{i}" for i in range(20)] + ["fail"])

    async def main() -> tuple[Worker, int, list[bytes]]:
        running = 0
        most = 0
        seen: list[bytes] = []
        all_in = asyncio.Event()

        async def handle(message: QueueMessage) -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            if running == 4:
                all_in.set()
            try:
                await asyncio.wait_for(all_in.wait(), 5)  # hold until four run together
                seen.append(message.payload)
                if message.payload == b"fail":
                    raise ValueError("cannot do it")
            finally:
                running -= 1

        async with AsyncMessagingClient(stack.rpc_url) as client:
            worker = Worker(Queue(client, Q), handle, concurrency=4, batch=10)
            await worker.run(until_empty=True)
            return worker, most, seen

    worker, most, seen = run(main())
    assert most == 4  # as many as allowed, never more
    assert sorted(seen) == sorted([f"job-{i}".encode() for i in range(20)] + [b"fail"])
    assert (worker.processed, worker.failed) == (20, 1)
    # the failure came back to the queue with the back-off (60 s): scheduled, not dead
    assert counts(stack) == (0, 0, 0, 20, 1)


def test_a_stopped_worker_finishes_what_it_runs_and_gives_back_the_rest(
    stack: Stack,
) -> None:
    stack.messaging.queue(Q).enqueue([f"job-{i}" for i in range(10)])

    async def main() -> Worker:
        started = asyncio.Event()
        release = asyncio.Event()

        async def handle(message: QueueMessage) -> None:
            started.set()
            await release.wait()

        async with AsyncMessagingClient(stack.rpc_url) as client:
            worker = Worker(Queue(client, Q), handle, concurrency=3, batch=10, wait_s=30)
            running = asyncio.ensure_future(worker.run())
            await started.wait()
            # When it is stopped while three handlers run
            worker.stop()
            await asyncio.sleep(0.1)
            assert not running.done()  # it waits for its handlers
            release.set()
            await running
            return worker

    worker = run(main())
    # Then the three were acked, and nothing stays leased
    assert worker.processed == 3
    assert counts(stack) == (0, 7, 0, 3, 0)
