"""Consume → process → publish, exactly once, in plain Python.

Orders arrive on ``demo:orders`` as numbers. A processor reads them through the
subscription ``totals``, keeps a running total in a transactional table (SQLite,
``txn.sqlite_table.SqliteTable``) and publishes one receipt per order to
``demo:receipts`` — all in one transaction per batch, with the subscription's new
position written as part of it (``tms.client.consumer.SubscriptionConsumer``). Kill it
at any point and run it again: every order gets exactly one receipt, in order, and the
total counts every order once (as transactional readers of both see them).

    .venv/bin/python examples/exactly_once.py            # starts its own stack
    .venv/bin/python examples/exactly_once.py --url http://127.0.0.1:15166 \\
        --tx-server 127.0.0.1:15165                        # against `make run`
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.consumer import SubscriptionConsumer
from tms.errors import SubscriptionExistsError, TopicAlreadyExistsError
from tms.model import TopicId
from tms.standalone import Launched
from tms.subscription import Preferences, SubscriptionId
from txn import TransactionContext, TransactionExecutor
from txn.client import TxClient
from txn.rpc.client import ThriftTxClient
from txn.sqlite_table import SqliteTable

ORDERS = TopicId("demo", "orders")
RECEIPTS = TopicId("demo", "receipts")
TOTALS = SubscriptionId(ORDERS, "totals")


def setup(client: MessagingClient) -> None:
    """The topics and the subscription (transactional: committed orders only)."""
    for topic in (ORDERS, RECEIPTS):
        with contextlib.suppress(TopicAlreadyExistsError):
            client.create_topic(topic)
    with contextlib.suppress(SubscriptionExistsError):
        client.create_subscription(TOTALS, Preferences(transactional=True))


def processor(
    client: MessagingClient, tx_client: TxClient, state: SqliteTable, *, batch: int = 100
) -> Callable[[], int]:
    """One call processes one batch in one transaction (retried on conflict); it
    returns how many orders it processed."""
    orders = SubscriptionConsumer(client, TOTALS)
    receipts = TransactionalPublisher(client)
    executor = TransactionExecutor(tx_client, [orders, receipts, state])

    def step() -> int:
        messages = orders.poll(batch)
        total = int(state.get(b"total") or b"0")
        for message in messages:
            total += int(message.payload)
            receipts.publish(RECEIPTS, [b"receipt for order " + message.payload])
        state.put(b"total", str(total).encode())
        return len(messages)

    return lambda: executor.execute(step)


def run(url: str, tx_server: str, state_path: Path, orders: int = 1000) -> None:
    client, tx_client = MessagingClient(url), ThriftTxClient(tx_server)
    setup(client)
    client.publish(ORDERS, [str(n) for n in range(1, orders + 1)])
    print(f"published {orders} orders to {ORDERS}")
    state = SqliteTable(state_path)
    step = processor(client, tx_client, state)
    processed = 0
    while done := step():
        processed += done
    print(f"processed {processed} orders")
    reader = tx_client.start_short()
    receipts = client.poll(RECEIPTS, transaction=reader, limit=orders + 1).messages
    tx_client.abort(reader)
    with TransactionContext(tx_client, state):
        total = int(state.get(b"total") or b"0")
    print(f"{len(receipts)} receipts, the last: {receipts[-1].payload.decode()}")
    print(f"total {total} (expected {orders * (orders + 1) // 2} for the orders published)")
    lag = client.get_subscription(TOTALS).lag
    print(f"subscription {TOTALS}: lag {lag.messages if lag else '?'}")
    state.close()
    client.close()
    tx_client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="messaging service (default: start a stack)")
    parser.add_argument("--tx-server", help="HOST:PORT of the transaction server")
    parser.add_argument("--state", type=Path, help="the SQLite file of the running total")
    parser.add_argument("--orders", type=int, default=1000, help="orders to publish")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as data:
        state = args.state or Path(data) / "totals.db"
        if args.url and args.tx_server:
            run(args.url, args.tx_server, state, args.orders)
            return 0
        with Launched(Path(data) / "stack") as stack:
            print(f"started a standalone stack: {stack.url}, transactions on {stack.tx_address}")
            run(stack.url, stack.tx_address, state, args.orders)
    return 0


if __name__ == "__main__":
    sys.exit(main())
