"""A subscription poll that asks to ``reread`` (an at-least-once reader, outside a
transaction of its own) and is held behind a transaction in progress answers that
transaction's messages in the first answer after it commits — no second request — read
with what the transaction manager says has finished; an aborted (invalidated) holder's
messages never appear; a poll that does not ask (the exactly-once consumer, whose reads
must use its own transaction's snapshot) is answered as before."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import Stack, running_stack
from tests.tms.http.test_held_wakeup import Background
from tms.aio.subscriber import Subscriber as AsyncSubscriber
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.subscriber import Subscriber
from tms.model import StoreRequest, TopicId
from tms.subscription import Preferences, SubscriptionId
from txn import TransactionContext

T = TopicId("ns1", "t")
S = SubscriptionId(T, "s")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("reread")) as stack:
        yield stack


@pytest.fixture
def topic(stack: Stack) -> Iterator[None]:
    stack.messaging.create_topic(T)
    stack.messaging.create_subscription(S, Preferences(transactional=True))
    yield
    stack.messaging.delete_topic(T)


@pytest.fixture(params=["rest", "binary"])
def client(request: pytest.FixtureRequest, stack: Stack) -> Iterator[MessagingClient]:
    if request.param == "rest":
        yield stack.messaging
        return
    binary = MessagingClient(stack.rpc_url, retries=0)
    yield binary
    binary.close()


def _holder(stack: Stack, payloads: list[bytes]) -> tuple[TransactionContext, Any]:
    """A transaction that published ``payloads`` (persisted) and has not committed."""
    publisher = TransactionalPublisher(stack.messaging)
    ctx = TransactionContext(stack.tx, publisher)
    ctx.start()
    publisher.publish(T, payloads)
    publisher.commit_tx()
    return ctx, publisher


def _held_poll(stack: Stack, client: MessagingClient, reader: Any) -> Background:
    """After a plain message, a poll with ``reread`` from the stored position, waiting."""
    stack.service.publish(StoreRequest.of(T, [b"plain after"]))
    start = stack.messaging.get_subscription(S).position
    poll = Background(
        lambda: client.poll_subscription(
            S, start=start, transaction=reader, wait_ms=30_000, reread=True
        )
    )
    assert poll.waiting()
    return poll


def _commit(stack: Stack, ctx: TransactionContext, publisher: Any) -> None:
    stack.tx.can_commit_or_throw(ctx.current_transaction, [])  # type: ignore[arg-type]
    stack.tx.commit_or_throw(ctx.current_transaction)  # type: ignore[arg-type]
    publisher.post_tx_commit()  # tells the service


@pytest.mark.parametrize("holder_first", [True, False], ids=["holder-older", "holder-newer"])
@pytest.mark.usefixtures("topic")
def test_the_holders_messages_come_in_the_first_answer_after_it_commits(
    stack: Stack, client: MessagingClient, holder_first: bool
) -> None:
    # Given a transactional reader held behind a transaction in progress (one that
    # started before the reader's, or after it)
    reader = None if holder_first else stack.tx.start_short()
    ctx, publisher = _holder(stack, [b"one", b"two"])
    reader = reader or stack.tx.start_short()
    poll = _held_poll(stack, client, reader)
    # When it commits (and says so)
    _commit(stack, ctx, publisher)
    # Then the one answer carries its messages, and what follows them
    batch = poll.get()
    assert [m.payload for m in batch.messages] == [b"one", b"two", b"plain after"]
    assert batch.fresh and not batch.held
    # and its position is committed with a transaction started after the answer
    newer = stack.tx.start_short()
    info = client.commit_subscription(S, batch.position, batch.version, transaction=newer)
    assert info.position == batch.position


@pytest.mark.usefixtures("topic")
def test_an_invalidated_holders_messages_never_appear(
    stack: Stack, client: MessagingClient
) -> None:
    # Given a reader held behind a transaction that published and will be invalidated
    # (its entries stay in the topic until cleanup)
    ctx, _publisher = _holder(stack, [b"never"])
    reader = stack.tx.start_short()
    poll = _held_poll(stack, client, reader)
    # When it is invalidated, and the service is told it finished
    current = ctx.current_transaction
    assert current is not None
    assert stack.tx.invalidate(current.transaction_id)
    stack.messaging.transactions_finished(T, [current.write_pointer])
    # Then the answer passes over its entries
    batch = poll.get()
    assert [m.payload for m in batch.messages] == [b"plain after"]
    assert batch.fresh


@pytest.mark.usefixtures("topic")
def test_without_reread_the_answer_is_held_finished_as_before(
    stack: Stack, client: MessagingClient
) -> None:
    ctx, publisher = _holder(stack, [b"one"])
    reader = stack.tx.start_short()
    poll = Background(lambda: client.poll_subscription(S, transaction=reader, wait_ms=30_000))
    assert poll.waiting()
    _commit(stack, ctx, publisher)
    batch = poll.get()
    assert batch.messages == [] and batch.held and batch.held_finished and not batch.fresh


@pytest.mark.usefixtures("topic")
def test_a_subscriber_gets_them_in_one_answer_and_commits_past_its_old_transaction(
    stack: Stack, client: MessagingClient
) -> None:
    # Given a subscriber waiting behind a transaction in progress, counting its polls
    ctx, publisher = _holder(stack, [b"one", b"two"])
    polls: list[Any] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        def poll_subscription(self, *args: Any, **kw: Any) -> Any:
            batch = client.poll_subscription(*args, **kw)
            polls.append(batch)
            return batch

    got: list[bytes] = []
    done = threading.Event()
    sub = Subscriber(Counting(), S, tx_client=stack.tx, wait_ms=30_000, commit_interval_s=0)  # type: ignore[arg-type]

    def consume() -> None:
        for message in sub:
            got.append(message.payload)
            if len(got) == 2:
                sub.commit(through=message)  # with a transaction newer than the read's
                done.set()
                return

    runner = Background(consume)
    assert runner.waiting()
    # When the holder commits
    _commit(stack, ctx, publisher)
    runner.get()
    # Then both came in the first answer after the commit, and the commit went through
    assert got == [b"one", b"two"]
    assert [b.fresh for b in polls if b.messages] == [True]
    assert stack.messaging.get_subscription(S).position == polls[-1].position
    sub.close()


@pytest.mark.usefixtures("topic")
def test_an_asyncio_subscriber_gets_them_and_commits(stack: Stack) -> None:
    ctx, publisher = _holder(stack, [b"one", b"two"])
    start = stack.messaging.get_subscription(S).position

    async def scenario() -> list[bytes]:
        async with AsyncSubscriber(
            stack.rpc_url, S, tx_server=stack.tx_address, wait_ms=30_000
        ) as sub:
            polling = asyncio.create_task(sub.getmany())
            await asyncio.sleep(0.3)
            assert not polling.done()
            await asyncio.to_thread(_commit, stack, ctx, publisher)
            batch = await polling
            await sub.commit(through=batch[-1])  # with a transaction newer than the read's
            return [m.payload for m in batch]

    assert asyncio.run(scenario()) == [b"one", b"two"]
    assert stack.messaging.get_subscription(S).position > start
