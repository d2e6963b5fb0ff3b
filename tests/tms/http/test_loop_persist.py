"""The exactly-once loop's two writes in flight at once, against the real servers (the
transaction server over Thrift, the messaging service over HTTP and over the binary
protocol, on loopback port 0): the publish of the outputs and the write of the
subscription's position are persisted concurrently (``txn.persisting``), and when either
fails — refused, or its answer lost — nothing of the transaction is visible to a
transactional reader and the subscription's position did not move."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack, running_stack
from tests.tms.http.test_subscription_clients import committed
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.consumer import SubscriptionConsumer
from tms.client.http import RollbackToken
from tms.client.rpc import RpcMessagingClient
from tms.errors import ServiceUnavailableError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import Preferences, SubscriptionId
from txn import TransactionContext
from txn.errors import TransactionFailureError
from txn.transaction import Transaction

IN = TopicId("ns", "in")
OUT = TopicId("ns", "out")
MISSING = TopicId("ns", "missing")
SUB = SubscriptionId(IN, "loop")


@pytest.fixture(params=["http", "tms"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path) as running:
        running.messaging.create_topic(IN)
        running.messaging.create_topic(OUT)
        running.messaging.publish(IN, [str(i) for i in range(5)])
        running.messaging.create_subscription(SUB, Preferences(transactional=True))
        url = running.url if request.param == "http" else running.rpc_url
        yield replace(running, url=url)


def faulty_client(url: str, publish: str = "ok", position: str = "ok") -> Any:
    """A client whose transactional publish and position write first meet each other
    (each waits until the other is in flight: persisted one after the other, they
    would never meet), then do as told: ``ok``, or ``lost`` (sent and stored, the
    answer lost on the way back)."""
    base = RpcMessagingClient if url.startswith("tms://") else MessagingClient
    meet = threading.Barrier(2, timeout=10)

    def after(what: str, call: Callable[[], Any]) -> Any:
        meet.wait()
        answer = call()
        if what == "lost":
            raise ServiceUnavailableError("connection reset while reading the answer")
        return answer

    class Faulty(base):  # type: ignore[valid-type,misc]
        def publish(
            self,
            topic: TopicId,
            payloads: Iterable[bytes | str],
            *,
            tx_write_pointer: int | None = None,
            ttls: Iterable[int | None] | None = None,
        ) -> RollbackToken | None:
            def call() -> RollbackToken | None:
                return super(Faulty, self).publish(
                    topic, payloads, tx_write_pointer=tx_write_pointer, ttls=ttls
                )

            return call() if tx_write_pointer is None else after(publish, call)

        def commit_in_transaction(
            self, sub: SubscriptionId, at: MessageId, version: int, transaction: Transaction
        ) -> None:
            after(
                position,
                lambda: super(Faulty, self).commit_in_transaction(sub, at, version, transaction),
            )

    return Faulty(url)


def loop_once(client: MessagingClient, stack: Stack, out: TopicId = OUT) -> Transaction:
    """One transaction of the loop: poll, publish one output per input, finish."""
    consumer, publisher = SubscriptionConsumer(client, SUB), TransactionalPublisher(client)
    ctx = TransactionContext(stack.tx, consumer, publisher)
    tx = ctx.start()
    messages = consumer.poll(100)
    assert [m.payload for m in messages] == [str(i).encode() for i in range(5)]
    publisher.publish(out, [b"out-" + m.payload for m in messages])
    ctx.finish()
    return tx


def unread(stack: Stack) -> list[bytes]:
    """What the subscription gives a new transaction: everything, if it did not move."""
    reader = stack.tx.start_short()
    try:
        batch = stack.messaging.poll_subscription(SUB, transaction=reader)
        return [m.payload for m in batch.messages]
    finally:
        stack.tx.abort(reader)


ALL = [str(i).encode() for i in range(5)]


def test_both_writes_in_flight_at_once_and_the_loop_commits(stack: Stack) -> None:
    client = faulty_client(stack.url)
    start = stack.messaging.get_subscription(SUB).position
    # When one transaction of the loop runs (its two writes meeting in flight)
    loop_once(client, stack)
    # Then the outputs and the new position are there together
    assert committed(stack, OUT) == [b"out-" + p for p in ALL]
    assert unread(stack) == []
    assert stack.messaging.get_subscription(SUB).position > start
    client.close()


@pytest.mark.parametrize(
    ("publish", "position", "outcome"),
    [
        ("refused", "ok", "aborted"),  # the publish refused (a topic that is not there)
        ("lost", "ok", "invalidated"),  # the publish stored, its answer lost
        ("ok", "lost", "invalidated"),  # the position written, its answer lost
    ],
)
def test_when_either_write_fails_nothing_is_visible_and_the_position_stays(
    stack: Stack, publish: str, position: str, outcome: str
) -> None:
    # Given a loop whose publish or position write fails while the other is in flight
    client = faulty_client(stack.url, "ok" if publish == "refused" else publish, position)
    before = stack.messaging.get_subscription(SUB)
    # When one transaction of the loop runs
    with pytest.raises(TransactionFailureError, match="persist changes of"):
        loop_once(client, stack, MISSING if publish == "refused" else OUT)
    # Then the transaction was aborted (a definite refusal) or invalidated (an answer
    # lost: the writes may be there), no output is visible to a transactional reader,
    # and the subscription reads from where it was
    reader = stack.tx.start_short()
    stack.tx.abort(reader)
    assert bool(reader.invalids) == (outcome == "invalidated")
    assert committed(stack, OUT) == []
    assert unread(stack) == ALL
    after = stack.messaging.get_subscription(SUB)
    assert after.position == before.position and after.committed_by == before.committed_by
    # And a loop without faults then processes every input once
    client.close()
    client = MessagingClient(stack.url)
    loop_once(client, stack)
    assert committed(stack, OUT) == [b"out-" + p for p in ALL]
    client.close()
