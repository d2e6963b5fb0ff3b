"""``tms.aio``'s subscriptions against the real servers (the transaction server, the
messaging service over the binary protocol): the at-least-once ``Subscriber`` that
commits as it goes and resumes where it stopped, and the exactly-once consume →
publish of ``SubscriptionConsumer`` in a producer's transaction — committed, failed,
two consumers racing, a position write whose answer is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack, running_stack
from tms.aio import AsyncMessagingClient, Producer, Subscriber, SubscriptionConsumer
from tms.errors import BadVersionError, ServiceUnavailableError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import Preferences, SubscriptionId
from txn.errors import TransactionConflictError
from txn.transaction import Transaction

IN, OUT = TopicId("ns", "in"), TopicId("ns", "out")
SUB = SubscriptionId(IN, "proc")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path) as s:
        s.messaging.create_topic(IN)
        s.messaging.create_topic(OUT)
        yield s


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def committed(stack: Stack, topic: TopicId) -> list[bytes]:
    tx = stack.tx.start_short()
    try:
        return [m.payload for m in stack.messaging.poll(topic, transaction=tx).messages]
    finally:
        stack.tx.abort(tx)


def test_subscriber_commits_as_it_goes_and_resumes_where_it_stopped(stack: Stack) -> None:
    stack.messaging.publish(IN, [str(i) for i in range(20)])
    stack.messaging.create_subscription(SUB)

    async def main() -> tuple[list[bytes], list[bytes]]:
        seen: list[bytes] = []
        async with Subscriber(stack.rpc_url, SUB, batch=5, wait_ms=0, commit_interval_s=0) as s:
            async for message in s:
                seen.append(message.payload)
                if len(seen) == 12:
                    await s.commit(through=message)
                    break
        async with Subscriber(stack.rpc_url, SUB, batch=5, wait_ms=0) as s:
            rest = (await s.getmany()) + (await s.getmany())
        return seen, [m.payload for m in rest]

    seen, rest = run(main())
    assert seen + rest == [str(i).encode() for i in range(20)]
    # The second stopped with its last batch unprocessed (no getmany after it): it
    # committed the first one only, so the last comes again
    again = stack.messaging.poll_subscription(SUB).messages
    assert [m.payload for m in again] == [b"17", b"18", b"19"]


def test_subscriber_after_a_crash_delivers_again_what_was_not_committed(stack: Stack) -> None:
    stack.messaging.publish(IN, [str(i) for i in range(10)])
    stack.messaging.create_subscription(SUB)

    async def main() -> bytes:
        first = Subscriber(stack.rpc_url, SUB, batch=4, wait_ms=0, commit_interval_s=0)
        got = []
        async for message in first:  # commits ride on the polls: after 4 and 8
            got.append(message.payload)
            if len(got) == 9:
                break  # crash: no stop, no commit
        await first.client.close()
        async with Subscriber(stack.rpc_url, SUB, batch=4, wait_ms=0) as again:
            return (await again.__anext__()).payload

    assert run(main()) == b"8"


def test_a_transactional_subscriber_waits_for_the_commit(stack: Stack) -> None:
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))

    async def main() -> list[bytes]:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            tx_cm = producer.transaction()
            await tx_cm.__aenter__()
            await producer.publish(IN, b"later")
            async with Subscriber(
                stack.rpc_url, SUB, tx_server=stack.tx_address, wait_ms=5000
            ) as sub:
                reading = asyncio.ensure_future(sub.getmany())
                await asyncio.sleep(0.3)
                assert not reading.done()  # held behind the open transaction
                await tx_cm.__aexit__(None, None, None)
                return [m.payload for m in await reading]

    assert run(main()) == [b"later"]


def test_consume_publish_in_one_transaction_is_exactly_once(stack: Stack) -> None:
    stack.messaging.publish(IN, [str(i) for i in range(50)])
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))

    async def main() -> None:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            consumer = SubscriptionConsumer(producer, SUB)
            failed = False
            while True:
                try:
                    async with producer.transaction():
                        messages = await consumer.getmany(7)
                        messages += await consumer.getmany(3)  # two reads, one transaction
                        for m in messages:
                            await producer.publish(OUT, b"out-" + m.payload)
                        if not failed and messages and messages[0].payload == b"20":
                            failed = True
                            raise RuntimeError("the processing failed")
                except RuntimeError:
                    continue
                if not messages:
                    return

    run(main())
    assert committed(stack, OUT) == [f"out-{i}".encode() for i in range(50)]
    info = stack.messaging.get_subscription(SUB)
    assert info.lag is not None and info.lag.messages == 0 and info.committed_by is not None


def test_two_consumers_racing_never_duplicate(stack: Stack) -> None:
    stack.messaging.publish(IN, [str(i) for i in range(40)])
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))

    async def worker(conflicts: list[int]) -> None:
        async with Producer(stack.rpc_url, tx_server=stack.tx_address) as producer:
            consumer = SubscriptionConsumer(producer, SUB)
            while True:
                try:
                    async with producer.transaction():
                        messages = await consumer.getmany(5)
                        await asyncio.sleep(0.01)  # let the other one read the same range
                        for m in messages:
                            await producer.publish(OUT, b"out-" + m.payload)
                except (TransactionConflictError, BadVersionError):
                    conflicts.append(1)
                    continue
                if not messages:
                    return

    async def main() -> int:
        conflicts: list[int] = []
        await asyncio.gather(worker(conflicts), worker(conflicts))
        return len(conflicts)

    conflicts = run(main())
    assert committed(stack, OUT) == [f"out-{i}".encode() for i in range(40)]
    assert conflicts > 0  # they did race


class _LosesPositionAnswers(AsyncMessagingClient):
    """Fault injection: the position is written, the answer is lost on the way back."""

    async def commit_in_transaction(
        self, sub: SubscriptionId, position: MessageId, version: int, transaction: Transaction
    ) -> None:
        await super().commit_in_transaction(sub, position, version, transaction)
        raise ServiceUnavailableError("connection reset while reading the answer")


def test_a_position_without_a_definite_answer_invalidates_the_transaction(
    stack: Stack,
) -> None:
    stack.messaging.publish(IN, [b"1", b"2"])
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))

    async def main() -> int:
        client = _LosesPositionAnswers(stack.rpc_url)
        async with Producer(client=client, tx_server=stack.tx_address) as producer:
            consumer = SubscriptionConsumer(producer, SUB)
            with pytest.raises(ServiceUnavailableError):
                async with producer.transaction() as tx:
                    assert [m.payload for m in await consumer.getmany()] == [b"1", b"2"]
        await client.close()
        return tx.transaction_id

    tx_id = run(main())
    assert tx_id in stack.manager.get_snapshot().invalid  # not aborted: invalidated
    fresh = stack.tx.start_short()
    again = stack.messaging.poll_subscription(SUB, transaction=fresh).messages
    assert [m.payload for m in again] == [b"1", b"2"]


def test_a_refused_commit_rolls_the_position_back(stack: Stack) -> None:
    # Given two overlapping transactions on one subscription: the earlier commits first
    stack.messaging.publish(IN, [str(i) for i in range(10)])
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))

    async def main() -> None:
        async with (
            Producer(stack.rpc_url, tx_server=stack.tx_address) as first,
            Producer(stack.rpc_url, tx_server=stack.tx_address) as second,
        ):
            one, two = SubscriptionConsumer(first, SUB), SubscriptionConsumer(second, SUB)
            earlier, later = first.transaction(), second.transaction()
            await earlier.__aenter__()
            await later.__aenter__()
            assert len(await one.getmany(3)) == 3
            await earlier.__aexit__(None, None, None)
            assert len(await two.getmany(8)) == 8  # its snapshot does not see the commit
            # When the later one ends, its position is written, then refused
            with pytest.raises(TransactionConflictError):
                await later.__aexit__(None, None, None)

    run(main())
    # Then its position was removed (an aborted write pointer would read as committed,
    # and as the newest): the subscription is where the earlier one left it
    fresh = stack.tx.start_short()
    again = stack.messaging.poll_subscription(SUB, transaction=fresh).messages
    assert [m.payload for m in again] == [str(i).encode() for i in range(3, 10)]
