"""The latency part of ``benchmarks.subs_bench``: transactional publishes at a fixed
rate (from publisher processes, or from one process of asyncio publishers), a
transactional subscription's ``Subscriber`` or a transactional ``follow`` holding the
messages; each message's time after its commit split in the order's wait and the
wake-up, the publishers' lateness, and how the service's held waits ended. Run it with
``python -m benchmarks.subs_bench --parts latency`` (its docstring)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from typing import Any

import requests

from tms.aio import Producer
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher, flush_finished, send_finished
from tms.client.subscriber import Subscriber
from tms.model import TopicId
from tms.standalone import Launched
from tms.subscription import Preferences, SubscriptionId
from txn import TransactionContext
from txn.rpc.client import ThriftTxClient

__all__ = ["bench_latency"]

PAYLOAD = os.urandom(50) + b"\x00" * 50  # (its first 16 bytes: a key and a time)


class _CommitClock:
    """A participant that notes when its transaction committed (its post-commit step
    runs before the publisher's, which tells the service)."""

    def __init__(self) -> None:
        self.at_ns = 0

    def start_tx(self, tx: Any) -> None:
        pass

    def update_tx(self, tx: Any) -> None:
        pass

    def get_tx_changes(self) -> list[bytes]:
        return []

    def commit_tx(self) -> bool:
        return True

    def post_tx_commit(self) -> None:
        self.at_ns = time.time_ns()

    def rollback_tx(self) -> bool:
        return True

    def transaction_aware_name(self) -> str:
        return "commit-clock"


@dataclass(frozen=True, slots=True)
class _Offer:
    """One publisher's share of a run: its ``number`` (in each message's key), how many
    transactions at what rate, whether it sends the word, the start signal ``go`` and
    the queue ``out`` its results go to."""

    number: int
    count: int
    rate: float
    notify: bool
    go: Any
    out: Any

    def unpacked(self) -> tuple[int, int, float, bool, Any, Any]:
        return self.number, self.count, self.rate, self.notify, self.go, self.out


def _publisher(url: str, tx_address: str, topic: TopicId, offer: _Offer) -> None:
    """Publish ``count`` messages, one per transaction; each payload starts with its key
    (``_key``: this publisher's ``number`` and the message's sequence number, unique in a
    run) and the time just before its publish. Puts ``{key: commit time}`` on ``out``."""
    number, count, rate, notify, go, out = offer.unpacked()
    client, tx_client = MessagingClient(url), ThriftTxClient(tx_address)
    publisher = TransactionalPublisher(client, notify_finished=notify)
    clock = _CommitClock()
    committed: dict[bytes, int] = {}
    go.wait()
    interval = 1.0 / rate
    next_at = time.perf_counter()
    late: list[float] = []
    for seq in range(count):
        late.append(max(0.0, time.perf_counter() - next_at) * 1000)
        next_at += interval
        key = number.to_bytes(4, "big") + seq.to_bytes(4, "big")
        with TransactionContext(tx_client, clock, publisher):
            stamp = time.time_ns()
            publisher.publish(topic, [key + stamp.to_bytes(8, "big") + PAYLOAD[16:]])
        committed[key] = clock.at_ns
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    out.put((committed, late))
    flush_finished(5.0)  # a forked child ends without atexit: the last words go out now
    client.close()
    tx_client.close()


def _async_publisher(*args: Any, **kwargs: Any) -> None:
    """``_publish_async`` in a process of its own (a ``Process`` target)."""
    asyncio.run(_publish_async(*args, **kwargs))


async def _publish_async(
    rpc_url: str, url: str, tx_address: str, topic: TopicId, offer: _Offer
) -> None:
    """``_publisher``'s work from one event loop: a paced loop starts one task per
    transaction at its time (an open loop: a slow answer does not delay the next
    start), each publishing over the binary protocol with ``tms.aio.Producer``; with
    ``notify``, each committed transaction's word goes to the service as
    ``TransactionalPublisher`` sends it (REST, from a thread)."""
    number, count, rate, notify, go, out = offer.unpacked()
    rest = MessagingClient(url)
    committed: dict[bytes, int] = {}
    async with Producer(rpc_url, tx_server=tx_address) as producer:

        async def one(seq: int) -> None:
            key = number.to_bytes(4, "big") + seq.to_bytes(4, "big")
            async with producer.transaction():
                stamp = time.time_ns()
                token = await producer.publish(topic, key + stamp.to_bytes(8, "big") + PAYLOAD[16:])
            committed[key] = time.time_ns()
            if notify and token is not None:
                send_finished(rest, [(topic, token)])

        await asyncio.to_thread(go.wait)
        tasks = []
        interval = 1.0 / rate
        next_at = time.perf_counter()
        late: list[float] = []
        for seq in range(count):
            late.append(max(0.0, time.perf_counter() - next_at) * 1000)
            tasks.append(asyncio.create_task(one(seq)))
            next_at += interval
            delay = next_at - time.perf_counter()
            await asyncio.sleep(max(delay, 0))  # (0: yield, so the started tasks run)
        await asyncio.gather(*tasks)
    out.put((committed, late))
    flush_finished(5.0)
    rest.close()


def _key(payload: bytes) -> bytes:
    """A latency message's key: its publisher's number and sequence number. (Not the
    send time: two publisher processes can read the same nanosecond — seen once in ten
    runs — and a consumer counting by send time then waits for a message it has.)"""
    return payload[:8]


def _sent_ns(payload: bytes) -> int:
    return int.from_bytes(payload[8:16], "big")


def _order_split(
    received: dict[bytes, tuple[int, int]], committed: dict[bytes, int]
) -> tuple[list[float], list[float]]:
    """Split each message's time after its commit (ms) in two: the order's wait (until
    the last transaction with an entry before it in the topic committed: it cannot be
    read before, DESIGN_NOTES 3) and the wake-up (from then to the consumer holding
    it). ``received``: in the order the consumer read, the topic's order."""
    waits: list[float] = []
    wakes: list[float] = []
    last = 0
    for key, (_, got) in received.items():
        last = max(last, committed[key])
        waits.append((last - committed[key]) / 1e6)
        wakes.append((got - last) / 1e6)
    return sorted(waits), sorted(wakes)


def _held_waits(url: str) -> dict[str, float]:
    """The service's ``tms_held_waits_total`` by outcome (docs/tms.md)."""
    counts: dict[str, float] = {}
    for line in requests.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith('tms_held_waits_total{outcome="'):
            labels, value = line.rsplit(" ", 1)
            counts[labels.split('"')[1]] = float(value)
    return counts


def _pct(values: list[float], q: float) -> float:
    return round(values[min(len(values) - 1, int(q * len(values)))], 2)


def bench_latency(
    stack: Launched,
    consumer: str,
    *,
    notify: bool,
    seconds: float,
    rate: int,
    procs: int,
    in_async: bool = False,
) -> dict[str, Any]:
    """With ``in_async``: one publisher process of asyncio tasks (``_async_publisher``)
    offers ``rate``, else ``procs`` processes (``_publisher``) offer ``rate / procs`` each."""
    client, tx_client = MessagingClient(stack.url), ThriftTxClient(stack.tx_address)
    topic = TopicId("bench", f"lat-{consumer}-{notify}-{time.monotonic_ns()}")
    client.create_topic(topic)
    waits_before = _held_waits(stack.url)
    if in_async:
        procs = 1
    expected = int(seconds * rate) // procs * procs
    ctx = mp.get_context("fork")
    go = ctx.Event()
    out = ctx.Queue()
    publishers = [
        ctx.Process(
            target=_async_publisher if in_async else _publisher,
            args=(
                *((stack.rpc_url,) if in_async else ()),
                stack.url,
                stack.tx_address,
                topic,
                _Offer(number, expected // procs, rate / procs, notify, go, out),
            ),
        )
        for number in range(procs)
    ]
    for p in publishers:
        p.start()
    deadline = time.monotonic() + seconds + 60
    stop = lambda: time.monotonic() > deadline  # noqa: E731
    if consumer == "subscription":
        sub = SubscriptionId(topic, "reader")
        client.create_subscription(sub, Preferences(transactional=True))
        messages: Any = Subscriber(client, sub, tx_client=tx_client, wait_ms=1000, stop=stop)
    else:
        messages = client.follow(topic, start=0, tx_client=tx_client, wait_ms=1000, stop=stop)
    received: dict[bytes, tuple[int, int]] = {}  # key: (sent, received)
    duplicates = 0
    started = time.perf_counter()
    go.set()
    for message in messages:
        duplicates += _key(message.payload) in received
        received[_key(message.payload)] = (_sent_ns(message.payload), time.time_ns())
        if len(received) >= expected:
            break
    elapsed = time.perf_counter() - started
    if isinstance(messages, Subscriber):
        messages.close()
    committed: dict[bytes, int] = {}
    lateness: list[float] = []  # how late each transaction started (ms)
    for _ in publishers:
        theirs, late = out.get(timeout=60)
        committed.update(theirs)
        lateness.extend(late)
    for p in publishers:
        p.join(60)
    client.close()
    tx_client.close()
    if len(received) < expected:  # (a message the service never delivered)
        missing = len(set(committed) - set(received))
        raise RuntimeError(f"the consumer holds {len(received)} of {expected}: {missing} missing")
    waits_after = _held_waits(stack.url)
    held_waits = {k: round(v - waits_before.get(k, 0.0)) for k, v in waits_after.items()}
    latencies = sorted((got - sent) / 1e6 for sent, got in received.values())
    after_commit = sorted((got - committed[key]) / 1e6 for key, (_, got) in received.items())
    waits, wakes = _order_split(received, committed)
    return {
        "consumer": consumer,
        "publisher_tells_service": notify,
        "publishers": "async" if in_async else procs,
        "offered_per_s": rate,
        "achieved_per_s": round(len(latencies) / elapsed),
        "messages": len(latencies),
        "duplicates": duplicates,
        "p50_ms": _pct(latencies, 0.5),
        "p99_ms": _pct(latencies, 0.99),
        "max_ms": round(latencies[-1], 2) if latencies else None,
        "after_commit_p50_ms": _pct(after_commit, 0.5),
        "after_commit_p99_ms": _pct(after_commit, 0.99),
        "order_waited_share": round(sum(w > 0 for w in waits) / max(len(waits), 1), 3),
        "order_wait_p99_ms": _pct(waits, 0.99),
        "wakeup_p50_ms": _pct(wakes, 0.5),
        "wakeup_p99_ms": _pct(wakes, 0.99),
        # (late publishers: the machine could not run them on time; and the commit's
        # time is taken when the publisher runs again, so it may be late too)
        "publishers_late_p99_ms": _pct(sorted(lateness), 0.99),
        "held_waits": held_waits,
    }
