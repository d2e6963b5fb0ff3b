"""A consume → process → publish loop run as its own process by
``test_exactly_once_kill``: it reads ``ns:in`` through the transactional subscription
``ns:in:loop``, adds each number to a running sum in a transactional SQLite table and
publishes one ``out-N`` per input to ``ns:out``, one transaction per batch, until the
subscription has nothing left (then prints ``drained`` and exits 0).

``--crash POINT:N`` kills the process with SIGKILL the N-th time it reaches POINT:

* ``processing`` — in the middle of a batch (half its outputs buffered);
* ``persisted`` — after every participant persisted (outputs, position and table rows
  written), before the transaction commits;
* ``committed`` — after the transaction committed, before the participants' post-commit
  steps.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Collection

from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.consumer import SubscriptionConsumer
from tms.model import TopicId
from tms.subscription import SubscriptionId
from txms_common.retry import RetryNTimes
from txn import TransactionExecutor
from txn.rpc.client import ThriftTxClient
from txn.sqlite_table import SqliteTable
from txn.transaction import Transaction

IN = TopicId("ns", "in")
OUT = TopicId("ns", "out")
SUB = SubscriptionId(IN, "loop")


class Crash:
    """Kills this process the ``at``-th time ``point`` is reached."""

    def __init__(self, spec: str | None) -> None:
        point, _, count = (spec or ":").partition(":")
        self.point = point
        self.left = int(count) if count else 0

    def reached(self, point: str) -> None:
        if point == self.point:
            self.left -= 1
            if self.left == 0:
                os.kill(os.getpid(), signal.SIGKILL)


class CrashPoint:
    """A ``TransactionAware`` that reaches a point at one step of the protocol:
    ``commit_tx`` when placed last (everything else persisted), ``post_tx_commit`` when
    placed first (committed, nothing after it)."""

    def __init__(self, crash: Crash, *, persisted: str = "", committed: str = "") -> None:
        self._crash = crash
        self._persisted = persisted
        self._committed = committed

    def start_tx(self, tx: Transaction) -> None:
        pass

    def update_tx(self, tx: Transaction) -> None:
        pass

    def get_tx_changes(self) -> Collection[bytes]:
        return ()

    def commit_tx(self) -> bool:
        if self._persisted:
            self._crash.reached(self._persisted)
        return True

    def post_tx_commit(self) -> None:
        if self._committed:
            self._crash.reached(self._committed)

    def rollback_tx(self) -> bool:
        return True

    def transaction_aware_name(self) -> str:
        return "crash-point"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--tx-server", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--batch", type=int, default=7)
    parser.add_argument("--crash")
    args = parser.parse_args(argv)
    crash = Crash(args.crash)
    client = MessagingClient(args.url, retries=1, backoff_s=0.05, timeout_s=10)
    tx_client = ThriftTxClient(args.tx_server, retry=RetryNTimes(1), timeout_s=10)
    table = SqliteTable(args.state)
    consumer = SubscriptionConsumer(client, SUB)
    publisher = TransactionalPublisher(client)
    participants = [
        CrashPoint(crash, committed="committed"),
        consumer,
        publisher,
        table,
        CrashPoint(crash, persisted="persisted"),
    ]
    executor = TransactionExecutor(tx_client, participants)

    def step() -> int:
        messages = consumer.poll(args.batch)
        total = int(table.get(b"sum") or b"0")
        for i, message in enumerate(messages):
            total += int(message.payload)
            publisher.publish(OUT, [b"out-" + message.payload])
            if i == len(messages) // 2:
                crash.reached("processing")
        table.put(b"sum", str(total).encode())
        return len(messages)

    while executor.execute(step):
        pass
    print("drained", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
