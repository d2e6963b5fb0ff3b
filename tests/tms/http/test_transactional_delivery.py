"""Several transactional publishers (their post-commit words sent by the words thread)
and, at the same time, a transactional subscription's ``Subscriber`` committing on its
polls and a transactional ``follow``: each gets every committed message exactly once,
each publisher's in its order (the path of the wake-up benchmark, small)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.servers import running_stack
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher, flush_finished
from tms.client.subscriber import Subscriber
from tms.model import Message, TopicId
from tms.subscription import Preferences, SubscriptionId
from txn import TransactionContext
from txn.rpc.client import ThriftTxClient

T = TopicId("ns1", "delivered")
PUBLISHERS, EACH = 3, 60


def _publish(url: str, tx_address: str, number: int) -> None:
    with MessagingClient(url) as client, ThriftTxClient(tx_address) as tx_client:
        publisher = TransactionalPublisher(client)
        for seq in range(EACH):
            with TransactionContext(tx_client, publisher):
                publisher.publish(T, [f"{number}:{seq}".encode()])
        flush_finished()  # the words go out before the client closes


def _keys(messages: list[Message]) -> list[tuple[int, int]]:
    pairs = (m.payload.decode().split(":") for m in messages)
    return [(int(n), int(s)) for n, s in pairs]


def test_every_committed_message_is_delivered_once_to_each_consumer(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        stack.messaging.create_topic(T)
        sub = SubscriptionId(T, "reader")
        stack.messaging.create_subscription(sub, Preferences(transactional=True))
        expected = PUBLISHERS * EACH
        deadline = time.monotonic() + 60
        got: dict[str, list[Message]] = {"subscription": [], "follow": []}

        def consume(kind: str) -> None:
            with MessagingClient(stack.url) as client, ThriftTxClient(stack.tx_address) as tx:
                stop = lambda: time.monotonic() > deadline  # noqa: E731
                if kind == "subscription":
                    messages = Subscriber(
                        client, sub, tx_client=tx, wait_ms=500, commit_interval_s=0, stop=stop
                    )
                else:
                    messages = client.follow(T, start=0, tx_client=tx, wait_ms=500, stop=stop)
                for message in messages:
                    got[kind].append(message)
                    if len(got[kind]) >= expected:
                        if isinstance(messages, Subscriber):
                            messages.commit(through=message)  # the last one is processed
                        break
                messages.close()  # (a follow aborts its transaction: before tx is closed)

        consumers = [threading.Thread(target=consume, args=(k,)) for k in got]
        publishers = [
            threading.Thread(target=_publish, args=(stack.url, stack.tx_address, n))
            for n in range(PUBLISHERS)
        ]
        for thread in consumers + publishers:
            thread.start()
        for thread in consumers + publishers:
            thread.join(90)
        everything = sorted((n, s) for n in range(PUBLISHERS) for s in range(EACH))
        for kind, messages in got.items():
            keys = _keys(messages)
            assert sorted(keys) == everything, kind  # each once: none lost, none twice
            for n in range(PUBLISHERS):
                assert [s for p, s in keys if p == n] == list(range(EACH)), kind
        # and the subscription's committed position is past them all: nothing more to read
        tx = stack.tx.start_short()
        rest = stack.messaging.poll_subscription(sub, transaction=tx)
        assert rest.messages == []
