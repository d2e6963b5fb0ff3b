"""The exactly-once loop's persist step: how long a transaction's ``commit_tx`` calls take
(the publish of 100 outputs and the write of the subscription's position) against the
whole transaction (start, poll 100, publish 100, persist, ``canCommit``, commit), and
the inputs per second of the loop as a whole. The
standalone stack in its own process, the loop in this one, over ``tms://`` and then
``http://``; medians (and the persist step's mean) over ``--transactions``
transactions.

    python -m benchmarks.loop_persist [--transactions 100]

Run it in two checkouts alternately (A B A B) to compare their persist steps; figures
in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.subs_bench import _fill
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.consumer import SubscriptionConsumer
from tms.model import TopicId
from tms.standalone import Launched
from tms.subscription import Preferences, SubscriptionId
from txn.context import TransactionContext
from txn.rpc.client import ThriftTxClient


class _Timed(TransactionContext):
    """Records how long each persist step took."""

    persists: list[float] = []  # one list for the run

    def _persist(self) -> None:
        started = time.perf_counter()
        try:
            super()._persist()
        finally:
            self.persists.append(time.perf_counter() - started)


def run(url: str, tx_address: str, transactions: int, batch: int = 100) -> dict[str, float]:
    client, tx_client = MessagingClient(url), ThriftTxClient(tx_address)
    tag = str(time.monotonic_ns())
    inputs, outputs = TopicId("bench", f"in-{tag}"), TopicId("bench", f"out-{tag}")
    _fill(client, inputs, transactions * batch, [str(n).encode() for n in range(1, 1001)])
    client.create_topic(outputs)
    sub = SubscriptionId(inputs, "loop")
    client.create_subscription(sub, Preferences(transactional=True))
    consumer, publisher = SubscriptionConsumer(client, sub), TransactionalPublisher(client)
    _Timed.persists.clear()
    totals: list[float] = []
    for _ in range(transactions):
        started = time.perf_counter()
        ctx = _Timed(tx_client, consumer, publisher)
        ctx.start()
        messages = consumer.poll(batch)
        publisher.publish(outputs, [b"out " + m.payload for m in messages])
        ctx.finish()
        totals.append(time.perf_counter() - started)
    client.close()
    tx_client.close()
    return {
        "persist_ms": round(1000 * statistics.median(_Timed.persists), 2),
        "transaction_ms": round(1000 * statistics.median(totals), 2),
        "persist_mean_ms": round(1000 * statistics.fmean(_Timed.persists), 2),
        "inputs_per_s": round(transactions * batch / sum(totals)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, Launched(Path(tmp) / "d") as stack:
        for name, url in (("tms", stack.rpc_url), ("http", stack.url)):
            print(name, run(url, stack.tx_address, args.transactions), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
