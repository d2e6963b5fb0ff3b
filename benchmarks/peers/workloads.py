"""The workloads, the same for every system: what is sent, how it is timed, in what order.

``plan(settings, systems)`` turns the settings into a list of ``Task``s, each a label
and a function returning result records. Points are interleaved: every system in turn
runs one point before any runs the next, so a slow patch of the machine falls on all of
them. Fills (loading a large topic before reading it) are tasks of their own.

Every system is given the same payload bytes (``payload``: half random, half zeros, as
in the other benchmarks here) and the same batch and concurrency. Each measurement
returns ``report.Record``s: workload, params, system, value and unit, extra.

The ``measure_*`` functions are the measurements themselves, usable one by one: each
checks what it got back (every message, the right payload) and raises ``RuntimeError``
when a system returns less than it was asked for, so a broken adapter fails the run
instead of reporting a fast nothing.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from benchmarks.peers.base import Cursor, System, Workload
from benchmarks.peers.driver import drive, spawn
from benchmarks.peers.report import Record

__all__ = [
    "TAIL_KEEP",
    "Settings",
    "Task",
    "latency_payload",
    "measure_cycles",
    "measure_from",
    "measure_latency",
    "measure_pipelined",
    "measure_publish",
    "measure_queue",
    "measure_scan",
    "payload",
    "percentile",
    "plan",
    "settings_for",
]

TAIL_KEEP = 1000  # messages written after the tail mark: the newest ones a tail read gets


@dataclass(frozen=True)
class Settings:
    """Every size and duration the harness uses. Durations in seconds."""

    seconds: float
    message_bytes: tuple[int, ...] = (100, 1024)
    batches: tuple[int, ...] = (1, 10, 100)
    producers: tuple[int, ...] = (1, 8, 16, 32)
    pipeline_connections: tuple[int, ...] = (1, 16)
    pipeline_window: int = 64
    consume_messages: int = 1_000_000
    consume_page: int = 1000
    tail_pages: tuple[int, ...] = (10, 100, 1000)
    latency_rates: tuple[int, ...] = (100, 1000, 10_000)
    latency_bytes: tuple[int, ...] = (100, 1024)
    latency_seconds: float = 10.0
    async_rate: int = 2000
    """Above this offered rate the sender does not wait for each answer (systems whose
    ``sends_async``); the others sit those points out."""
    tx_batches: tuple[int, ...] = (1, 10, 100)
    tx_producers: tuple[int, ...] = (1, 8)
    cycle_clients: tuple[int, ...] = (1, 8, 32)
    growth_sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000, 10_000_000)
    read_seconds: float = 0.5
    queue_batches: tuple[int, ...] = (100,)
    queue_workers: tuple[int, ...] = (8,)
    workloads: frozenset[Workload] = field(default_factory=lambda: frozenset(Workload))

    def __post_init__(self) -> None:
        published = {
            (s, b, p) for s in self.message_bytes for b in self.batches for p in self.producers
        }
        for b in self.tx_batches:
            for p in self.tx_producers:
                if (100, b, p) not in published and Workload.PUBLISH in self.workloads:
                    # the overhead ratio divides by the plain publish of the same point
                    raise ValueError(f"tx point (100 B, batch {b}, {p} producers) not published")
        if sorted(self.growth_sizes) != list(self.growth_sizes) or any(
            size < 2 * TAIL_KEEP for size in self.growth_sizes
        ):
            raise ValueError("growth sizes ascend, each at least 2,000")
        for prev, size in zip(self.growth_sizes, self.growth_sizes[1:], strict=False):
            if size // 2 < prev:
                raise ValueError("each growth size at least doubles the last")
        if self.consume_messages < 2 * TAIL_KEEP:
            raise ValueError("consume_messages at least 2,000")


def settings_for(
    quick: bool, seconds: float | None = None, workloads: frozenset[Workload] | None = None
) -> Settings:
    """The full run (~18 min on the 2-vCPU VM) or the smoke run (``quick``, < 2 min)."""
    chosen = workloads if workloads is not None else frozenset(Workload)
    if not quick:
        return Settings(seconds=seconds or 3.0, workloads=chosen)
    return Settings(
        seconds=seconds or 0.5,
        message_bytes=(100,),
        batches=(1, 100),
        producers=(1, 8),
        pipeline_connections=(1, 4),
        consume_messages=20_000,
        tail_pages=(10, 1000),
        latency_rates=(500, 5000),
        latency_bytes=(100,),
        latency_seconds=1.5,
        tx_batches=(1, 100),
        tx_producers=(1,),
        cycle_clients=(1, 8),
        growth_sizes=(10_000, 100_000),
        read_seconds=0.2,
        workloads=chosen,
    )


@lru_cache(maxsize=16)
def payload(size: int) -> bytes:
    """The message every system is sent: ``size // 2`` seeded random bytes, then zeros
    (compressible by half, as real payloads often are). The same bytes in every run,
    built once per size (a paced sender builds one per message: ``latency_payload``)."""
    if size < 8:
        raise ValueError("messages are at least 8 bytes (the latency timestamp)")
    return random.Random(size).randbytes(size // 2) + bytes(size - size // 2)


def latency_payload(size: int, now_ns: int) -> bytes:
    """``payload(size)`` with its first 8 bytes the send time (ns since the epoch)."""
    return now_ns.to_bytes(8, "big") + payload(size)[8:]


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of an ascending list (nearest rank, below); 0.0 when empty."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Task:
    label: str
    run: Callable[[], list[Record]]


def _record(
    workload: Workload,
    params: dict[str, Any],
    system: System,
    value: float,
    unit: str,
    **extra: Any,
) -> Record:
    return Record(workload.value, params, system.name, round(value, 3), unit, extra)


# -- measurements ---------------------------------------------------------------------------


def measure_publish(
    system: System, topic: str, *, size: int, batch: int, producers: int, seconds: float, tx: bool
) -> float:
    """Messages per second from ``producers`` closed-loop producers, each publishing
    ``batch`` messages of ``size`` bytes per request (with a state change, if ``tx``)."""
    payloads = [payload(size)] * batch
    system.create_topic(topic)
    try:
        if tx:
            rate = drive(
                lambda i: system.tx_publisher(topic, payloads, f"producer-{i}".encode()),
                producers,
                seconds,
                forks=system.forks,
            )
        else:
            rate = drive(
                lambda i: system.publisher(topic, payloads), producers, seconds, forks=system.forks
            )
    finally:
        system.drop_topic(topic)
    return rate.per_second


def measure_pipelined(
    system: System, topic: str, *, size: int, window: int, connections: int, seconds: float
) -> float:
    """Messages per second from ``connections`` callers, each publishing one message
    per request with ``window`` requests in flight at once."""
    body = payload(size)
    system.create_topic(topic)
    try:
        rate = drive(
            lambda i: system.pipelined_publisher(topic, body, window),
            connections,
            seconds,
            forks=system.forks,
        )
    finally:
        system.drop_topic(topic)
    return rate.per_second


def measure_cycles(system: System, clients: int, seconds: float) -> float:
    rate = drive(
        lambda i: system.tx_cycle(f"client-{i}".encode()), clients, seconds, forks=system.forks
    )
    return rate.per_second


def measure_queue(system: System, queue: str, *, batch: int, workers: int, seconds: float) -> float:
    """Messages per second through a work queue: ``workers`` competing closed-loop
    workers, each enqueueing ``batch`` 100-byte messages, receiving up to ``batch`` and
    acking what it got, round after round (all durable steps)."""
    payloads = [payload(100)] * batch
    system.create_queue(queue)
    try:
        rate = drive(
            lambda i: system.queue_worker(queue, payloads), workers, seconds, forks=system.forks
        )
    finally:
        system.drop_queue(queue)
    return rate.per_second


def _timed(fn: Callable[[], int], min_seconds: float) -> tuple[int, float]:
    """Call ``fn`` (returns items) until ``min_seconds`` passed, at least once."""
    items, begun = 0, time.perf_counter()
    while True:
        items += fn()
        elapsed = time.perf_counter() - begun
        if elapsed >= min_seconds:
            return items, elapsed


def measure_scan(
    system: System, topic: str, expected: bytes, *, count: int, page: int, min_s: float
) -> float:
    """Messages per second reading the whole topic from its start in pages of ``page``;
    raises if a pass does not return exactly ``count`` messages, the first ``expected``."""
    reader = system.reader(topic)

    def one_pass() -> int:
        cursor, n = reader.first(), 0
        while True:
            payloads, cursor = reader.read(cursor, page)
            if not payloads:
                break
            if n == 0 and payloads[0] != expected:
                raise RuntimeError(f"{system.name} returned a different payload")
            n += len(payloads)
        if n != count:
            raise RuntimeError(f"{system.name} returned {n} of {count} messages")
        return n

    try:
        items, elapsed = _timed(one_pass, min_s)
    finally:
        reader.close()
    return items / elapsed


def measure_from(system: System, topic: str, cursor: Cursor, page: int, min_s: float) -> float:
    """Messages per second of repeated reads of ``page`` messages from ``cursor``."""
    reader = system.reader(topic)

    def read() -> int:
        payloads, _ = reader.read(cursor, page)
        if len(payloads) < page:
            raise RuntimeError(f"{system.name} returned {len(payloads)} of {page} messages")
        return page

    try:
        items, elapsed = _timed(read, min_s)
    finally:
        reader.close()
    return items / elapsed


def measure_latency(
    system: System, topic: str, size: int, rate: int, seconds: float, *, wait: bool = True
) -> dict[str, float]:
    """One paced sender (its own process, or thread for an in-process system), one
    message per publish at ``rate`` per second; the consumer here. Latency is from just
    before the publish to the consumer holding the message, in ms. Without ``wait`` the
    sender does not wait for each answer (``System.async_sender``, on an event loop
    whose timers tick by the millisecond: it sends in bursts that keep the rate)."""
    count = max(1, int(rate * seconds))
    system.create_topic(topic)

    def send() -> None:
        publish = system.sender(topic)
        interval, next_at = 1.0 / rate, time.perf_counter()
        for _ in range(count):
            next_at += interval
            publish(latency_payload(size, time.time_ns()))
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

    async def paced() -> None:
        # The loop's timers tick by the millisecond, so at a high rate one wake-up sends
        # every message that is due by then, and every pass yields to the loop: a sender
        # that fell behind and sent on without yielding would hold its requests in the
        # client's buffer (and its answers unread) until it caught up.
        sender = await system.async_sender(topic)
        start, sent = time.perf_counter(), 0
        answers = []
        while sent < count:
            due = min(count, int((time.perf_counter() - start) * rate) + 1)
            while sent < due:
                answers.append(
                    asyncio.ensure_future(sender.send(latency_payload(size, time.time_ns())))
                )
                sent += 1
            await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter()))
        await asyncio.gather(*answers)
        await sender.close()

    deadline = time.monotonic() + seconds + 30
    stream: Iterator[bytes] = system.subscribe(topic, lambda: time.monotonic() > deadline)
    latencies: list[float] = []
    try:
        sender = spawn(send if wait else lambda: asyncio.run(paced()), forks=system.forks)
        for message in stream:
            latencies.append((time.time_ns() - int.from_bytes(message[:8], "big")) / 1e6)
            if len(latencies) >= count:
                break
        sender.join(60)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        system.drop_topic(topic)
    if len(latencies) < count:
        raise RuntimeError(f"{system.name}: {len(latencies)} of {count} messages arrived")
    latencies.sort()
    return {
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "p999_ms": round(percentile(latencies, 0.999), 3),
        "messages": len(latencies),
    }


# -- the plan ---------------------------------------------------------------------------------


def _supports(system: System, workload: Workload, settings: Settings) -> bool:
    return workload in system.workloads and workload in settings.workloads


def plan(settings: Settings, systems: list[System]) -> list[Task]:
    """Every task of a run, in order."""
    s = settings
    tasks: list[Task] = []

    def each(workload: Workload) -> list[System]:
        return [target for target in systems if _supports(target, workload, s)]

    for size in s.message_bytes:
        for batch in s.batches:
            for producers in s.producers:
                params = {"message_bytes": size, "batch": batch, "producers": producers}
                for target in each(Workload.PUBLISH):
                    tasks.append(_publish_task(target, params, s.seconds, tx=False))
    for connections in s.pipeline_connections:
        for target in each(Workload.PIPELINED):
            tasks.append(_pipelined_task(target, connections, s))
    for batch in s.tx_batches:
        for producers in s.tx_producers:
            params = {"message_bytes": 100, "batch": batch, "producers": producers}
            for target in each(Workload.TX_PUBLISH):
                tasks.append(_publish_task(target, params, s.seconds, tx=True))
    for clients in s.cycle_clients:
        for target in each(Workload.TX_CYCLE):
            tasks.append(_cycle_task(target, clients, s.seconds))
    for size in s.message_bytes:
        readers = [target for target in systems if _supports(target, Workload.CONSUME, s)]
        for target in readers:
            tasks += _read_tasks(target, size, s)
    for size in s.latency_bytes:
        for rate in s.latency_rates:
            for target in each(Workload.LATENCY):
                wait = rate <= s.async_rate
                if wait or target.sends_async:
                    tasks.append(_latency_task(target, size, rate, s.latency_seconds, wait))
    for target in each(Workload.GROWTH):
        tasks += _growth_tasks(target, s)
    for batch in s.queue_batches:
        for workers in s.queue_workers:
            for target in each(Workload.QUEUE):
                tasks.append(_queue_task(target, batch, workers, s.seconds))
    return tasks


def _queue_task(target: System, batch: int, workers: int, seconds: float) -> Task:
    def run() -> list[Record]:
        queue = f"queue_{batch}_{workers}"
        rate = measure_queue(target, queue, batch=batch, workers=workers, seconds=seconds)
        params = {"message_bytes": 100, "batch": batch, "workers": workers}
        return [_record(Workload.QUEUE, params, target, rate, "msg/s")]

    return Task(f"queue x{batch} w{workers} {target.name}", run)


def _publish_task(target: System, params: dict[str, Any], seconds: float, *, tx: bool) -> Task:
    workload = Workload.TX_PUBLISH if tx else Workload.PUBLISH
    size, batch, producers = params["message_bytes"], params["batch"], params["producers"]
    topic = f"{'tx' if tx else 'pub'}_{size}_{batch}_{producers}"

    def run() -> list[Record]:
        rate = measure_publish(
            target, topic, size=size, batch=batch, producers=producers, seconds=seconds, tx=tx
        )
        return [_record(workload, params, target, rate, "msg/s")]

    return Task(f"{workload} {size} B x{batch} p{producers} {target.name}", run)


def _pipelined_task(target: System, connections: int, s: Settings) -> Task:
    size, window = 100, s.pipeline_window
    params = {"message_bytes": size, "window": window, "connections": connections}

    def run() -> list[Record]:
        rate = measure_pipelined(
            target,
            f"pipe_{connections}",
            size=size,
            window=window,
            connections=connections,
            seconds=s.seconds,
        )
        return [_record(Workload.PIPELINED, params, target, rate, "msg/s")]

    return Task(f"pipelined {size} B w{window} c{connections} {target.name}", run)


def _cycle_task(target: System, clients: int, seconds: float) -> Task:
    def run() -> list[Record]:
        rate = measure_cycles(target, clients, seconds)
        return [_record(Workload.TX_CYCLE, {"clients": clients}, target, rate, "cycles/s")]

    return Task(f"tx cycles c{clients} {target.name}", run)


def _read_tasks(target: System, size: int, s: Settings) -> list[Task]:
    topic = f"read_{size}"
    body = payload(size)
    tail: list[Cursor] = []

    def fill() -> list[Record]:
        target.create_topic(topic)
        target.fill(topic, s.consume_messages - TAIL_KEEP, body)
        tail.append(target.mark(topic))
        target.fill(topic, TAIL_KEEP, body)
        return []

    def scan() -> list[Record]:
        rate = measure_scan(
            target,
            topic,
            body,
            count=s.consume_messages,
            page=s.consume_page,
            min_s=s.read_seconds,
        )
        params = {
            "message_bytes": size,
            "topic_messages": s.consume_messages,
            "page": s.consume_page,
        }
        return [_record(Workload.CONSUME, params, target, rate, "msg/s")]

    def tail_reads() -> list[Record]:
        records = []
        if Workload.TAIL in target.workloads and Workload.TAIL in s.workloads:
            for page in s.tail_pages:
                rate = measure_from(target, topic, tail[0], page, s.read_seconds)
                params = {"message_bytes": size, "topic_messages": s.consume_messages, "page": page}
                records.append(_record(Workload.TAIL, params, target, rate, "msg/s"))
        target.drop_topic(topic)
        return records

    n = f"{s.consume_messages:,}"
    return [
        Task(f"fill {n} x {size} B {target.name}", fill),
        Task(f"consume {size} B from start {target.name}", scan),
        Task(f"consume {size} B at tail {target.name}", tail_reads),
    ]


def _latency_task(target: System, size: int, rate: int, seconds: float, wait: bool) -> Task:
    def run() -> list[Record]:
        result = measure_latency(target, f"lat_{size}_{rate}", size, rate, seconds, wait=wait)
        params = {"message_bytes": size, "rate": rate}
        extra = {k: v for k, v in result.items() if k != "p99_ms"}
        return [_record(Workload.LATENCY, params, target, result["p99_ms"], "ms p99", **extra)]

    return Task(f"latency {size} B at {rate}/s {target.name}", run)


def _growth_tasks(target: System, s: Settings) -> list[Task]:
    topic = "growth"
    body = payload(100)
    stored = [0]
    tasks = []

    def grow(size: int) -> list[Record]:
        if stored[0] == 0:
            target.create_topic(topic)
        target.fill(topic, size // 2 - stored[0], body)
        middle = target.mark(topic)
        target.fill(topic, size - TAIL_KEEP - size // 2, body)
        tail = target.mark(topic)
        target.fill(topic, TAIL_KEEP, body)
        stored[0] = size
        records = []
        for at, cursor in (("tail", tail), ("middle", middle)):
            rate = measure_from(target, topic, cursor, 1000, s.read_seconds)
            params = {"topic_messages": size, "at": at}
            records.append(_record(Workload.GROWTH, params, target, 1e6 / rate, "ms/1000 msgs"))
        if size == s.growth_sizes[-1]:
            target.drop_topic(topic)
        return records

    for size in s.growth_sizes:
        tasks.append(Task(f"growth {size:,} {target.name}", lambda size=size: grow(size)))
    return tasks
