"""The Python client's subscriptions against the real servers (the transaction server
over Thrift, the messaging service over HTTP and over the binary protocol, all on
loopback port 0): the exactly-once consumer with a publisher and a transactional table,
concurrent consumers of one subscription, answers lost on the way back, and the
at-least-once ``Subscriber`` — each test once over ``http://`` and once over ``tms://``
(a subscription's poll and commits as binary requests, its administration on REST)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack, running_stack
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.consumer import SubscriptionConsumer
from tms.client.rpc import RpcMessagingClient
from tms.client.subscriber import Subscriber
from tms.errors import ServiceUnavailableError, SubscriptionNotFoundError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import Preferences, Start, SubscriptionId
from txn import TransactionContext
from txn.errors import TransactionFailureError
from txn.executor import TransactionExecutor
from txn.sqlite_table import SqliteTable
from txn.transaction import Transaction

IN = TopicId("ns", "in")
OUT = TopicId("ns", "out")
SUB = SubscriptionId(IN, "proc")


@pytest.fixture(params=["http", "tms"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """The stack, with ``messaging`` and ``url`` over HTTP or the binary protocol."""
    with running_stack(tmp_path) as running:
        running.messaging.create_topic(IN)
        running.messaging.create_topic(OUT)
        if request.param == "http":
            yield running
            return
        client = MessagingClient(running.rpc_url, retries=1, backoff_s=0.01)
        assert isinstance(client, RpcMessagingClient)
        try:
            yield replace(running, url=running.rpc_url, messaging=client)
        finally:
            client.close()


def committed(stack: Stack, topic: TopicId) -> list[bytes]:
    """What a transactional reader sees now."""
    reader = stack.tx.start_short()
    try:
        return [m.payload for m in stack.messaging.poll(topic, transaction=reader).messages]
    finally:
        stack.tx.abort(reader)


def processor(
    stack: Stack, table: SqliteTable | None, client: MessagingClient | None = None
) -> tuple[TransactionExecutor, SubscriptionConsumer]:
    """A consume → process → publish loop: a running sum in ``table`` (when given) and
    one output per input."""
    client = client or stack.messaging
    consumer = SubscriptionConsumer(client, SUB)
    publisher = TransactionalPublisher(client)

    def step() -> int:
        messages = consumer.poll(7)
        if table is not None:
            total = int(table.get(b"sum") or b"0") + sum(int(m.payload) for m in messages)
            table.put(b"sum", str(total).encode())
        publisher.publish(OUT, [b"out-" + m.payload for m in messages])
        return len(messages)

    participants: list[Any] = [consumer, publisher] + ([table] if table is not None else [])
    executor = TransactionExecutor(stack.tx, participants)
    executor.step = step  # type: ignore[attr-defined]
    return executor, consumer


def run_until_drained(executor: TransactionExecutor) -> None:
    while executor.execute(executor.step):  # type: ignore[attr-defined]
        pass


def test_consume_process_publish_is_exactly_once(stack: Stack, tmp_path: Path) -> None:
    # Given 50 numbered inputs and a transactional subscription
    stack.messaging.publish(IN, [str(i) for i in range(50)])
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))
    table = SqliteTable(tmp_path / "state.db")
    executor, _consumer = processor(stack, table)
    # When the loop runs until there is nothing left
    run_until_drained(executor)
    # Then every output is there once, in input order, the sum is exact, the position
    # is at the end and came from the last transaction
    assert committed(stack, OUT) == [f"out-{i}".encode() for i in range(50)]
    with TransactionContext(stack.tx, table):
        assert table.get(b"sum") == str(sum(range(50))).encode()
    info = stack.messaging.get_subscription(SUB)
    assert info.lag is not None and info.lag.messages == 0 and info.committed_by is not None


def test_concurrent_consumers_of_one_subscription_never_duplicate(stack: Stack) -> None:
    # Given two processors on one subscription, each with its own client, and nothing
    # else they share (no state of their own that would conflict)
    stack.messaging.publish(IN, [str(i) for i in range(60)])
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))
    clients = [MessagingClient(stack.url) for _ in range(2)]
    executors = [processor(stack, None, client)[0] for client in clients]
    # When both run at once (conflicts are retried by the executor)
    threads = [threading.Thread(target=run_until_drained, args=(e,)) for e in executors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # Then each input's output is there exactly once, in order
    assert committed(stack, OUT) == [f"out-{i}".encode() for i in range(60)]
    for client in clients:
        client.close()


def loses_commit_answers(url: str) -> MessagingClient:
    """Fault injection: the position is written, the answer is lost on the way back."""
    base = RpcMessagingClient if url.startswith("tms://") else MessagingClient

    class LosesCommitAnswers(base):  # type: ignore[valid-type,misc]
        def commit_in_transaction(
            self, sub: SubscriptionId, position: MessageId, version: int, transaction: Transaction
        ) -> None:
            super().commit_in_transaction(sub, position, version, transaction)
            raise ServiceUnavailableError("connection reset while reading the answer")

    return LosesCommitAnswers(url)  # type: ignore[no-any-return]


def test_a_position_without_a_definite_answer_invalidates_the_transaction(
    stack: Stack,
) -> None:
    stack.messaging.publish(IN, [b"1", b"2"])
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))
    client = loses_commit_answers(stack.url)
    consumer = SubscriptionConsumer(client, SUB)
    ctx = TransactionContext(stack.tx, consumer)
    tx = ctx.start()
    assert [m.payload for m in consumer.poll()] == [b"1", b"2"]
    # When the commit's answer is lost, the transaction cannot commit
    with pytest.raises(TransactionFailureError):
        ctx.finish()
    # Then it was invalidated, not aborted (an aborted pointer would read as committed),
    # and the subscription reads from the start again
    assert tx.transaction_id in stack.tx.start_short().invalids
    fresh = stack.tx.start_short()
    assert [m.payload for m in client.poll_subscription(SUB, transaction=fresh).messages] == [
        b"1",
        b"2",
    ]
    client.close()


def test_subscriber_commits_as_it_goes_and_resumes_where_it_stopped(stack: Stack) -> None:
    stack.messaging.publish(IN, [str(i) for i in range(20)])
    stack.messaging.create_subscription(SUB)
    seen: list[bytes] = []
    # Given a subscriber that processes 12 messages and stops
    with Subscriber(stack.messaging, SUB, batch=5, wait_ms=0, commit_interval_s=0) as sub:
        for message in sub:
            seen.append(message.payload)
            if len(seen) == 12:
                sub.commit(through=message)
                break
    # Then the next one goes on after the 12th
    rest: list[bytes] = []
    with Subscriber(stack.messaging, SUB, batch=5, wait_ms=0) as sub:
        for message in sub:
            rest.append(message.payload)
            if len(rest) == 8:
                break
    assert seen + rest == [str(i).encode() for i in range(20)]


def test_subscriber_after_a_crash_delivers_again_what_was_not_committed(stack: Stack) -> None:
    stack.messaging.publish(IN, [str(i) for i in range(10)])
    stack.messaging.create_subscription(SUB)
    first = Subscriber(stack.messaging, SUB, batch=4, wait_ms=0, commit_interval_s=0)
    got = []
    for message in first:  # commits ride on the polls: after 4 and 8 messages
        got.append(message.payload)
        if len(got) == 9:
            break  # crash: no close, no commit
    again = Subscriber(stack.messaging, SUB, batch=4, wait_ms=0)
    redelivered = next(iter(again)).payload
    assert redelivered == b"8"  # at least once: the last batch comes again


def test_subscriber_follows_a_seek(stack: Stack) -> None:
    stack.messaging.publish(IN, [b"a", b"b", b"c"])
    stack.messaging.create_subscription(SUB)
    sub = Subscriber(stack.messaging, SUB, batch=1, wait_ms=0, commit_interval_s=0)
    stream = iter(sub)
    assert next(stream).payload == b"a"
    assert next(stream).payload == b"b"  # the commit after "a" rode on this poll
    info = stack.messaging.get_subscription(SUB)
    stack.messaging.seek_subscription(SUB, Start.earliest(), info.version)
    # Its next commit finds the record changed: it reads it again and follows the seek
    assert [next(stream).payload for _ in range(3)] == [b"a", b"b", b"c"]


def test_a_transactional_subscriber_reads_committed_messages_only(stack: Stack) -> None:
    stack.messaging.create_subscription(SUB, Preferences(transactional=True))
    publisher = TransactionalPublisher(stack.messaging)
    with TransactionContext(stack.tx, publisher):
        publisher.publish(IN, [b"committed"])
    open_ctx = TransactionContext(stack.tx, publisher)
    open_ctx.start()
    publisher.publish(IN, [b"not yet"])
    publisher.commit_tx()  # written, not committed
    stack.messaging.publish(IN, [b"after"])
    got: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        with Subscriber(
            stack.messaging, SUB, tx_client=stack.tx, wait_ms=200, stop=done.is_set
        ) as sub:
            for message in sub:
                got.append(message.payload)
                if len(got) == 3:
                    done.set()

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(1.0)
    assert got == [b"committed"]  # held before the open transaction's message
    open_ctx.finish()
    reader.join(30)
    assert got == [b"committed", b"not yet", b"after"]


def test_a_deleted_subscription(stack: Stack) -> None:
    info = stack.messaging.create_subscription(SUB)
    stack.messaging.delete_subscription(SUB, info.version)
    with pytest.raises(SubscriptionNotFoundError):
        stack.messaging.get_subscription(SUB)
