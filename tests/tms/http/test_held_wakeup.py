"""A long poll held behind a transaction in progress waits for that transaction to
finish, and is woken as soon as the service learns it: from the publisher's word
(``finished``), or by asking the transaction manager. Topic polls and subscription polls
alike."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.servers import running_stack
from tests.tms.helpers import tx
from tests.tms.http.conftest import Served
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.codec import avro
from tms.codec.avro import ConsumeSpec
from tms.guard import TransactionStateGuard
from tms.http.app import API, HttpConfig
from tms.http.waiting import LongPoll, TopicWaiters
from tms.metrics import TmsMetrics
from tms.model import StoreRequest, TopicId
from tms.subscription import Preferences, SubscriptionId
from txn import InProcessTxClient, TransactionContext, TransactionManager, TxConfig
from txn.codec import encode_transaction

T = TopicId("ns1", "t")


class Background:
    """A call on a thread of its own; its result once it returned."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:
            self.error = exc

    def waiting(self, seconds: float = 0.3) -> bool:
        self._thread.join(seconds)
        return self._thread.is_alive()

    def get(self, timeout_s: float = 20.0) -> Any:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "still waiting"
        if self.error is not None:
            raise self.error
        return self.result


def held_poll(served: Served, wp: int, path: str) -> Background:
    reader = tx(wp - 10, wp + 10, in_progress=(wp,))
    body = avro.encode_consume_request(ConsumeSpec(transaction=encode_transaction(reader)))
    return Background(
        lambda: served.http.post(
            f"{served.url}/v1/namespaces/ns1/topics/t/{path}",
            params={"wait_ms": "30000"},
            data=body,
            headers={"Content-Type": "avro/binary"},
            timeout=60,
        )
    )


@pytest.mark.parametrize("path", ["poll", "subscriptions/s/poll"])
def test_a_held_poll_waits_and_is_woken_by_the_publishers_word(make_server: Any, path: str) -> None:
    # Given a transactional reader held behind a transaction in progress (and no
    # transaction manager the service could ask: only the word can wake it)
    served: Served = make_server(HttpConfig(port=0, held_recheck_ms=60_000))
    served.service.create_topic(T)
    served.service.subscriptions.create(SubscriptionId(T, "s"), Preferences(transactional=True))
    wp = served.clock.now_ms() * 1_000_000
    served.service.publish(StoreRequest.of(T, [b"in tx"], wp))
    poll = held_poll(served, wp, path)
    # Then it waits rather than answering at once
    assert poll.waiting()
    # When the publisher says its transaction finished
    finished = served.http.post(
        f"{served.url}/v1/namespaces/ns1/topics/t/finished",
        json={"transactionWritePointers": [wp]},
    )
    assert finished.status_code == 200
    # Then the poll answers: held, and the holder finished (read on with a new one)
    answer = poll.get()
    assert answer.status_code == 200
    assert answer.headers["X-Tms-Held"] == "true"
    assert answer.headers["X-Tms-Held-Finished"] == "true"
    assert avro.decode_consume_response(answer.content) == []


def test_word_that_came_before_the_poll_is_not_lost(served: Served) -> None:
    served.service.create_topic(T)
    wp = served.clock.now_ms() * 1_000_000
    served.service.publish(StoreRequest.of(T, [b"in tx"], wp))
    served.service.transactions_finished(T, [wp])  # before anyone waited
    answer = held_poll(served, wp, "poll").get()
    assert answer.headers["X-Tms-Held-Finished"] == "true"


def test_without_a_transaction_manager_a_held_poll_answers_after_the_recheck(
    make_server: Any,
) -> None:
    served: Served = make_server(HttpConfig(port=0, held_recheck_ms=50))
    served.service.create_topic(T)
    wp = served.clock.now_ms() * 1_000_000
    served.service.publish(StoreRequest.of(T, [b"in tx"], wp))
    answer = held_poll(served, wp, "poll").get()
    assert answer.headers["X-Tms-Held"] == "true"
    assert "X-Tms-Held-Finished" not in answer.headers


def test_the_service_asks_the_manager_when_nobody_says(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        client: MessagingClient = stack.messaging
        client.create_topic(T)
        # Given a publisher that does not say when it committed, in an open transaction
        publisher = TransactionalPublisher(client, notify_finished=False)
        ctx = TransactionContext(stack.tx, publisher)
        ctx.start()
        publisher.publish(T, [b"late"])
        publisher.commit_tx()  # the message is written; the transaction is still open
        reader = stack.tx.start_short()
        poll = Background(lambda: client.poll(T, transaction=reader, wait_ms=30_000))
        assert poll.waiting()
        # When it commits without a word
        stack.tx.can_commit_or_throw(ctx.current_transaction, [])  # type: ignore[arg-type]
        stack.tx.commit_or_throw(ctx.current_transaction)  # type: ignore[arg-type]
        # Then the service finds out by itself and the reader reads on with a new one
        result = poll.get()
        assert result.held and result.held_finished and result.messages == []
        assert [m.payload for m in client.poll(T, transaction=stack.tx.start_short()).messages] == [
            b"late"
        ]


def test_the_service_asks_the_manager_even_while_the_topic_keeps_changing() -> None:
    # Given a poll held behind a transaction whose publisher says nothing, on a topic
    # that changes far more often than the recheck interval (each change: a new read)
    manager = TransactionManager(TxConfig())
    manager.start()
    tx_client = InProcessTxClient(manager)
    holder = tx_client.start_short()

    async def scenario() -> tuple[str, bool]:
        loop = asyncio.get_running_loop()
        waiters = TopicWaiters(loop)
        with ThreadPoolExecutor(2) as pool:
            long_poll = LongPoll(waiters, TransactionStateGuard(tx_client), pool, recheck_s=0.05)

            async def read() -> str:
                return "held"

            async def changes() -> None:
                for version in itertools.count():
                    await asyncio.sleep(0.005)
                    waiters.listener(T, version)

            changing = asyncio.create_task(changes())
            # When the transaction commits without a word, soon after the poll began
            loop.call_later(0.2, tx_client.commit_or_throw, holder)
            try:
                return await long_poll.run(T, 5_000, read, lambda _r: (False, holder.write_pointer))
            finally:
                changing.cancel()

    try:
        # Then the poll learns it from the manager (not only at its deadline)
        assert asyncio.run(scenario()) == ("held", True)
    finally:
        manager.stop()


def test_a_committing_publisher_wakes_a_follower(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        client: MessagingClient = stack.messaging
        client.create_topic(T)
        publisher = TransactionalPublisher(client)
        ctx = TransactionContext(stack.tx, publisher)
        ctx.start()
        publisher.publish(T, [b"one"])
        publisher.commit_tx()
        reader = stack.tx.start_short()
        poll = Background(lambda: client.poll(T, transaction=reader, wait_ms=30_000))
        assert poll.waiting()
        stack.tx.can_commit_or_throw(ctx.current_transaction, [])  # type: ignore[arg-type]
        stack.tx.commit_or_throw(ctx.current_transaction)  # type: ignore[arg-type]
        publisher.post_tx_commit()  # the context's last step: tells the service
        assert poll.get().held_finished


def test_one_watcher_asks_the_manager_for_every_held_poll() -> None:
    # Given polls on three topics held behind two transactions whose publishers say
    # nothing, and a per-poll recheck far beyond the polls' wait
    manager = TransactionManager(TxConfig())
    manager.start()
    tx_client = InProcessTxClient(manager)
    first, second = tx_client.start_short(), tx_client.start_short()
    topics = [TopicId("ns1", name) for name in ("a", "b", "c")]
    holders = {topics[0]: first, topics[1]: first, topics[2]: second}

    async def scenario() -> tuple[list[tuple[str, bool]], int]:
        loop = asyncio.get_running_loop()
        waiters = TopicWaiters(loop)
        with ThreadPoolExecutor(2) as pool:
            guard = TransactionStateGuard(tx_client)
            long_poll = LongPoll(waiters, guard, pool, recheck_s=600.0, watch_s=0.01)

            async def read() -> str:
                return "held"

            def poll(topic: TopicId) -> Any:
                wp = holders[topic].write_pointer
                return long_poll.run(topic, 20_000, read, lambda _r: (False, wp))

            polls = [asyncio.create_task(poll(topic)) for topic in topics]
            while len(waiters.held()) < 2:  # (both pointers held on)
                await asyncio.sleep(0.001)
            # When both commit without a word
            tx_client.commit_or_throw(first)
            tx_client.commit_or_throw(second)
            results = await asyncio.gather(*polls)
            long_poll.close()
            # (every call the guard made was the watcher's: one for all the polls)
            return results, guard.refreshes - long_poll.watch_rounds

    try:
        # Then every poll learns it from the watcher, long before its own recheck
        results, others = asyncio.run(scenario())
        assert results == [("held", True)] * 3
        assert others == 0
    finally:
        manager.stop()


def test_the_watcher_stops_for_good_without_a_manager(make_server: Any) -> None:
    # Given a service that knows no transaction manager
    served: Served = make_server(HttpConfig(port=0, held_recheck_ms=50, held_watch_ms=1))
    served.service.create_topic(T)
    wp = served.clock.now_ms() * 1_000_000
    served.service.publish(StoreRequest.of(T, [b"in tx"], wp))
    # When two polls are held in turn, Then each answers held (not finished) after its
    # recheck, as before, and the watcher asked once only (it learnt nobody answers)
    for _ in range(2):
        answer = held_poll(served, wp, "poll").get()
        assert answer.headers["X-Tms-Held"] == "true"
        assert "X-Tms-Held-Finished" not in answer.headers
    long_poll = served.app[API].long_poll
    assert long_poll is not None and long_poll.watch_rounds == 1


def test_the_watcher_slows_down_while_nothing_it_watches_finishes() -> None:
    # Given a poll held for a second behind a transaction that stays open
    manager = TransactionManager(TxConfig())
    manager.start()
    tx_client = InProcessTxClient(manager)
    holder = tx_client.start_short()

    async def scenario() -> tuple[tuple[str, bool], int]:
        waiters = TopicWaiters(asyncio.get_running_loop())
        with ThreadPoolExecutor(2) as pool:
            guard = TransactionStateGuard(tx_client)
            long_poll = LongPoll(waiters, guard, pool, recheck_s=0.5, watch_s=0.002)

            async def read() -> str:
                return "held"

            result = await long_poll.run(T, 1_000, read, lambda _r: (False, holder.write_pointer))
            long_poll.close()
            return result, long_poll.watch_rounds

    try:
        # Then the watcher asked a handful of times (2, 4, 8 ... ms apart, up to the
        # recheck), not every 2 ms
        result, rounds = asyncio.run(scenario())
        assert result == ("held", False)
        assert 1 <= rounds <= 12
    finally:
        manager.stop()


def test_held_waits_are_counted_by_outcome() -> None:
    # Given a poll that reads again when what it is held behind finishes, held first
    # behind one transaction and, read again, behind a second
    manager = TransactionManager(TxConfig())
    manager.start()
    tx_client = InProcessTxClient(manager)
    first, second = tx_client.start_short(), tx_client.start_short()
    metrics = TmsMetrics()

    async def scenario() -> tuple[int | None, bool]:
        waiters = TopicWaiters(asyncio.get_running_loop())
        with ThreadPoolExecutor(2) as pool:
            guard = TransactionStateGuard(tx_client)
            long_poll = LongPoll(
                waiters, guard, pool, recheck_s=600.0, watch_s=0.005, metrics=metrics
            )
            holds = iter([first.write_pointer, second.write_pointer, None])

            async def read() -> int | None:
                return next(holds)

            # When each commits (without a word)
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, tx_client.commit_or_throw, first)
            loop.call_later(0.1, tx_client.commit_or_throw, second)
            result = await long_poll.run(
                T, 20_000, read, lambda held: (held is None, held), lambda _wp: True
            )
            long_poll.close()
            return result

    try:
        assert asyncio.run(scenario()) == (None, False)
        # Then two waits ended finished, and the second hold was counted as held again
        count = lambda outcome: metrics.value("tms_held_waits_total", {"outcome": outcome})  # noqa: E731
        assert (count("finished"), count("held_again"), count("timeout")) == (2, 1, 0)
    finally:
        manager.stop()
