"""Subscriptions over loopback HTTP: the standalone stack in its own process, clients in
this one (and publishers in others).

* ``poll``: reading a topic of 100,000 messages in requests of 100, alternately (A B A B
  ...) as a plain poll from a position the client keeps and as a subscription poll that
  commits the previous batch's position riding on the request (``?commit``, what
  ``Subscriber`` sends with ``commit_interval_s=0``), and as poll then a separate
  ``commit`` request;
* ``loop``: the exactly-once loop of ``examples/exactly_once.py`` (in one transaction:
  poll 100 through a ``SubscriptionConsumer``, publish 100 outputs, the position written
  as part of the transaction), without application state and with the running sum in a
  SQLite ``SqliteTable``, alternately: input messages per second;
* ``memory``: the service's resident memory before and after creating 10,000
  subscriptions (over 100 topics), after listing them with lag and after a ``/metrics``
  scrape (the lag gauge);
* ``latency``: transactional publishes (start, publish one message, commit, tell the
  service) at a fixed rate from publisher processes; a transactional subscription's
  ``Subscriber`` and a transactional ``follow`` each hold the messages; latency from
  just before the publish request to the consumer having the message, and from the
  transaction's commit (when it returned) to the consumer having it, with the
  publisher's post-commit word to the service and without it (the service asks the
  transaction manager). The time after the commit is split in the order's wait (for
  a transaction with an earlier entry to commit) and the wake-up (from then on).

    python -m benchmarks.subs_bench [--quick] [--parts poll,loop,memory,latency]
                                    [--rate 1000] [--rounds 3]
                                    [--publishers 4 | --async-publishers]

``--async-publishers``: the latency part's publishers are asyncio tasks of one process
(``tms.aio.Producer`` over the binary protocol, one task per transaction started at
its time) instead of ``--publishers`` processes of the synchronous REST client, which
on a two-CPU machine cannot offer 1,000 transactions/s.

Results: ``benchmarks/results/subs.json``; figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from benchmarks.common import new_report, write_report
from benchmarks.subs_latency import bench_latency
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.consumer import SubscriptionConsumer
from tms.client.subscriber import Subscriber
from tms.ids import MessageId
from tms.model import TopicId
from tms.standalone import Launched
from tms.subscription import Preferences, Start, SubscriptionId
from txn import TransactionContext, TransactionExecutor
from txn.rpc.client import ThriftTxClient
from txn.sqlite_table import SqliteTable

RESULTS = Path(__file__).with_name("results")
PAYLOAD = os.urandom(50) + b"\x00" * 50


def sync_ms(directory: Path, samples: int = 100) -> float:
    """The median time of a 100-byte write + ``fdatasync`` in ``directory``: what every
    durable step costs at the moment (the figures move with it on a shared disk)."""
    path = directory / "sync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for _ in range(samples):
            os.write(fd, b"x" * 100)
            started = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return round(1000 * statistics.median(times), 3)


def _fill(client: MessagingClient, topic: TopicId, count: int, payloads: list[bytes]) -> None:
    client.create_topic(topic)
    for i in range(0, count, len(payloads)):
        client.publish(topic, payloads[: count - i])


# -- poll + commit against plain poll ------------------------------------------------


def _plain(client: MessagingClient, topic: TopicId, batch: int) -> int:
    position: bytes | None = None
    inclusive, total = True, 0
    while messages := client.poll(topic, start=position, inclusive=inclusive, limit=batch).messages:
        total += len(messages)
        position, inclusive = messages[-1][0], False
    return total


def _riding(
    client: MessagingClient, sub: SubscriptionId, batch: int, commit_later: bool = False
) -> int:
    """Polls each committing the previous one's position riding on it (``commit_later``:
    answered before that commit is durable; the last is made durable by an explicit
    commit)."""
    client.seek_subscription(sub, Start.earliest(), client.get_subscription(sub).version)
    start: MessageId | None = None
    version: int | None = None  # the first poll commits nothing
    total = 0
    while True:
        read = client.poll_subscription(
            sub, start=start, limit=batch, commit_version=version, commit_later=commit_later
        )
        if not read.messages:
            if commit_later and read.durable_version != read.version:
                client.commit_subscription(sub, read.position, read.version)
            return total
        total += len(read.messages)
        start, version = read.position, read.version


def _separate(client: MessagingClient, sub: SubscriptionId, batch: int) -> int:
    info = client.seek_subscription(sub, Start.earliest(), client.get_subscription(sub).version)
    version, total = info.version, 0
    while (read := client.poll_subscription(sub, limit=batch)).messages:
        total += len(read.messages)
        version = client.commit_subscription(sub, read.position, version).version
    return total


def _subscriber(client: MessagingClient, sub: SubscriptionId, batch: int, count: int) -> int:
    client.seek_subscription(sub, Start.earliest(), client.get_subscription(sub).version)
    total = 0
    with Subscriber(client, sub, batch=batch, wait_ms=0) as subscriber:
        for _message in subscriber:
            total += 1
            if total == count:
                subscriber.commit(through=_message)
                break
    return total


def bench_poll(url: str, count: int, rounds: int, batch: int = 100) -> dict[str, Any]:
    client = MessagingClient(url)
    topic = TopicId("bench", "subpoll")
    _fill(client, topic, count, [PAYLOAD] * 1000)
    sub = SubscriptionId(topic, "reader")
    client.create_subscription(sub)
    kinds: dict[str, Callable[[], int]] = {
        "plain": lambda: _plain(client, topic, batch),
        "poll_commit": lambda: _riding(client, sub, batch),
        "poll_then_commit": lambda: _separate(client, sub, batch),
        "subscriber_1s": lambda: _subscriber(client, sub, batch, count),
    }
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind, run in kinds.items():
            started = time.perf_counter()
            read = run()
            assert read == count, (kind, read)
            rates[kind].append(count / (time.perf_counter() - started))
        ratio = rates["poll_commit"][-1] / rates["plain"][-1]
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items())
            + f" msg/s; poll+commit / plain {ratio:.2f}",
            flush=True,
        )
    client.close()
    ratios = [c / p for c, p in zip(rates["poll_commit"], rates["plain"], strict=True)]
    return {
        "batch": batch,
        "messages": count,
        "rounds": {k: [round(x) for x in v] for k, v in rates.items()},
        "ratio_median": round(statistics.median(ratios), 3),
    }


# -- the exactly-once loop ------------------------------------------------------------


def bench_loop(
    url: str, tx_address: str, tmp: Path, count: int, *, state: bool, batch: int = 100
) -> Any:
    """The loop over ``count`` inputs, with the running sum in a ``SqliteTable`` (one more
    synced write per transaction) or without application state."""
    client, tx_client = MessagingClient(url), ThriftTxClient(tx_address)
    tag = f"{'state' if state else 'plain'}-{time.monotonic_ns()}"
    inputs, outputs = TopicId("bench", f"in-{tag}"), TopicId("bench", f"out-{tag}")
    _fill(client, inputs, count, [str(n).encode() for n in range(1, 1001)])
    client.create_topic(outputs)
    sub = SubscriptionId(inputs, "loop")
    client.create_subscription(sub, Preferences(transactional=True))
    table = SqliteTable(tmp / f"{tag}.db") if state else None
    consumer = SubscriptionConsumer(client, sub)
    publisher = TransactionalPublisher(client)
    participants: list[Any] = [consumer, publisher] + ([table] if table else [])
    executor = TransactionExecutor(tx_client, participants)
    sums = [0]

    def step() -> int:
        messages = consumer.poll(batch)
        total = int(table.get(b"total") or b"0") if table else sums[0]
        for message in messages:
            total += int(message.payload)
        publisher.publish(outputs, [b"out " + m.payload for m in messages])
        if table:
            table.put(b"total", str(total).encode())
        else:
            sums[0] = total
        return len(messages)

    started = time.perf_counter()
    cpu = time.process_time()
    processed = transactions = 0
    while done := executor.execute(step):
        processed += done
        transactions += 1
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - cpu
    if table:
        with TransactionContext(tx_client, table):
            sums[0] = int(table.get(b"total") or b"0")
        table.close()
    expected = sum(range(1, 1001)) * (count // 1000)
    assert processed == count and sums[0] == expected, (processed, sums[0], expected)
    client.close()
    tx_client.close()
    return {
        "inputs": count,
        "batch": batch,
        "state": "sqlite" if state else "none",
        "transactions": transactions,
        "inputs_per_s": round(count / elapsed),
        "client_cpu_ms_per_tx": round(1000 * client_cpu / transactions, 2),
    }


# -- memory ---------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def bench_memory(stack: Launched, subscriptions: int = 10_000, topics: int = 100) -> Any:
    client = MessagingClient(stack.url)
    pid = stack.proc.pid
    for t in range(topics):
        client.create_topic(TopicId("mem", f"t{t}"))
        client.publish(TopicId("mem", f"t{t}"), [PAYLOAD] * 10)
    before = _rss_mb(pid)
    started = time.perf_counter()
    for i in range(subscriptions):
        client.create_subscription(SubscriptionId(TopicId("mem", f"t{i % topics}"), f"s{i}"))
    create_s = time.perf_counter() - started
    created = _rss_mb(pid)
    started = time.perf_counter()
    listed = sum(len(client.list_subscriptions(TopicId("mem", f"t{t}"))) for t in range(topics))
    list_s = time.perf_counter() - started
    assert listed == subscriptions
    after_list = _rss_mb(pid)
    started = time.perf_counter()
    scrape = requests.get(f"{stack.url}/metrics", timeout=120).text
    scrape_s = time.perf_counter() - started
    gauges = sum(1 for line in scrape.splitlines() if line.startswith("tms_subscription_lag{"))
    after_scrape = _rss_mb(pid)
    client.close()
    return {
        "subscriptions": subscriptions,
        "topics": topics,
        "rss_mb_before": round(before, 1),
        "rss_mb_created": round(created, 1),
        "rss_mb_after_list": round(after_list, 1),
        "rss_mb_after_scrape": round(after_scrape, 1),
        "growth_mb": round(max(created, after_list, after_scrape) - before, 1),
        "create_per_s": round(subscriptions / create_s),
        "list_all_s": round(list_s, 2),
        "scrape_s": round(scrape_s, 2),
        "lag_gauges": gauges,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--parts", default="poll,loop,memory,latency")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument(
        "--async-publishers",
        action="store_true",
        help="one process of asyncio publishers (binary protocol) instead of --publishers",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "subs.json")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    report: dict[str, Any] = new_report("subscriptions", message_bytes=len(PAYLOAD))
    bench_dir = os.environ.get("BENCH_DIR")
    with tempfile.TemporaryDirectory(dir=bench_dir) as tmp, Launched(Path(tmp) / "d") as stack:
        report["sync_ms_before"] = sync_ms(Path(tmp))
        print(f"fdatasync: {report['sync_ms_before']} ms (median)", flush=True)
        if "memory" in parts:  # first: on a fresh service
            report["memory"] = bench_memory(stack, 2_000 if args.quick else 10_000)
            print(f"memory: {report['memory']}", flush=True)
        if "poll" in parts:
            count = 20_000 if args.quick else 100_000
            report["poll"] = bench_poll(stack.url, count, args.rounds)
            print(f"poll: {report['poll']}", flush=True)
        if "loop" in parts:
            count = 20_000 if args.quick else 50_000
            report["loop"] = []
            for _ in range(args.rounds):
                for state in (False, True):
                    result = bench_loop(stack.url, stack.tx_address, Path(tmp), count, state=state)
                    report["loop"].append(result)
                    print(f"exactly-once loop: {result}", flush=True)
        if "latency" in parts:
            seconds = 3.0 if args.quick else 10.0
            report["latency"] = []
            for _ in range(args.rounds):
                for consumer in ("subscription", "follow"):
                    for notify in (True, False):
                        result = bench_latency(
                            stack,
                            consumer,
                            notify=notify,
                            seconds=seconds,
                            rate=args.rate,
                            procs=args.publishers,
                            in_async=args.async_publishers,
                        )
                        report["latency"].append(result)
                        print(f"latency: {result}", flush=True)
        report["sync_ms_after"] = sync_ms(Path(tmp))
        print(f"fdatasync: {report['sync_ms_after']} ms (median)", flush=True)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
