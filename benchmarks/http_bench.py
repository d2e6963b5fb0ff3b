"""Messaging over loopback HTTP: the standalone stack in its own process, clients in others.

* publish: 100-byte messages, requests of 1 and 100 messages, 1 and 16 concurrent clients
  (``MessagingClient``, Avro bodies), every request durable before it answers;
* poll: reading a topic of 100,000 messages in requests of 10,000;
* latency: one publisher at 1,000 messages/s (one message per request), one transactional
  consumer long-polling with a fresh transaction per read; publish-to-visible p50/p99;
* floor: ``GET /ping`` with the same client.

    python -m benchmarks.http_bench [--quick] [--seconds S]

Results: ``benchmarks/results/http.json``.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.common import new_report, write_report
from tms.standalone import Launched

RESULTS = Path(__file__).with_name("results")
PAYLOAD = os.urandom(50) + b"\x00" * 50


@dataclass(frozen=True)
class Load:
    """One closed-loop load: ``clients`` callers, each issuing its next request when the
    last one answered. ``kind`` is ``publish`` (``MessagingClient``), ``raw`` (the same
    request, pre-encoded, over ``http.client``: a load generator, as wrk would be) or
    ``ping``."""

    url: str
    kind: str
    batch: int
    clients: int
    seconds: float
    tag: str = "x"


def _caller(load: Load) -> Callable[[], int]:
    from tms.client import MessagingClient
    from tms.codec import avro
    from tms.model import TopicId

    topic = TopicId("bench", load.tag)
    payloads = [PAYLOAD] * load.batch
    if load.kind == "publish":
        client = MessagingClient(load.url)
        return lambda: (client.publish(topic, payloads), load.batch)[1]
    parts = urlsplit(load.url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
    if load.kind == "ping":
        path, body, headers = "/ping", None, {}
    else:
        path = f"/v1/namespaces/bench/topics/{load.tag}/publish"
        body = avro.encode_publish_request(None, payloads)
        headers = {"Content-Type": "avro/binary"}
    method = "GET" if body is None else "POST"

    def call() -> int:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}")
        return load.batch if body is not None else 1

    return call


def _worker(load: Load, threads: int, barrier: Any, out: Any) -> None:
    counts = [0] * threads

    def run(i: int) -> None:
        call = _caller(load)
        barrier.wait()
        deadline = time.perf_counter() + load.seconds
        n = 0
        while time.perf_counter() < deadline:
            n += call()
        counts[i] = n

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put(sum(counts))


def drive(load: Load) -> float:
    """Messages (or requests, for ``ping``) per second, callers spread over processes."""
    ctx = mp.get_context("fork")
    procs_n = min(load.clients, 4)
    per = [
        load.clients // procs_n + (1 if i < load.clients % procs_n else 0) for i in range(procs_n)
    ]
    barrier = ctx.Barrier(load.clients)
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(load, n, barrier, out)) for n in per]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=load.seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    return total / load.seconds


def bench_poll(url: str, count: int) -> float:
    from tms.client import MessagingClient
    from tms.model import TopicId

    client = MessagingClient(url)
    topic = TopicId("bench", "polled")
    client.create_topic(topic)
    for _ in range(count // 1000):
        client.publish(topic, [PAYLOAD] * 1000)
    started = time.perf_counter()
    reads = 0
    total = 0
    while time.perf_counter() - started < 3.0:
        position: bytes | None = None
        inclusive = True
        while True:
            result = client.poll(topic, start=position, inclusive=inclusive, limit=10_000)
            if not result.messages:
                break
            total += len(result.messages)
            position, inclusive = result.messages[-1][0], False
        reads += 1
    rate = total / (time.perf_counter() - started)
    client.close()
    return rate


def _paced_publisher(url: str, tag: str, count: int, rate: int, ready: Any) -> None:
    from tms.client import MessagingClient
    from tms.model import TopicId

    topic = TopicId("bench", tag)
    with MessagingClient(url) as publisher:
        ready.wait()
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for _ in range(count):
            next_at += interval
            publisher.publish(topic, [time.time_ns().to_bytes(8, "big") + PAYLOAD[8:]])
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


def bench_latency(stack: Launched, seconds: float, rate: int = 1000) -> dict[str, float]:
    """Publisher and consumer in separate processes (one would hold the other's GIL)."""
    from tms.client import MessagingClient
    from tms.model import TopicId
    from txn.rpc.client import ThriftTxClient

    topic = TopicId("bench", "latency")
    consumer = MessagingClient(stack.url)
    tx = ThriftTxClient(stack.tx_address)
    consumer.create_topic(topic)
    latencies: list[float] = []
    expected = int(seconds * rate)
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    publisher = ctx.Process(
        target=_paced_publisher, args=(stack.url, topic.topic, expected, rate, ready)
    )
    publisher.start()
    deadline = time.monotonic() + seconds + 30
    ready.set()
    for message in consumer.follow(
        topic, start=0, tx_client=tx, wait_ms=1000, stop=lambda: time.monotonic() > deadline
    ):
        sent_ns = int.from_bytes(message.payload[:8], "big")
        latencies.append((time.time_ns() - sent_ns) / 1e6)
        if len(latencies) >= expected:
            break
    publisher.join(30)
    consumer.close()
    tx.close()
    latencies.sort()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)

    return {
        "messages": len(latencies),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "http.json")
    args = parser.parse_args(argv)
    seconds = args.seconds or (1.5 if args.quick else 5.0)
    report: dict[str, Any] = new_report(
        "http",
        message_bytes=len(PAYLOAD),
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        stack = Launched(Path(tmp) / "data")
        try:
            from tms.client import MessagingClient
            from tms.model import TopicId

            with MessagingClient(stack.url) as admin:
                for kind in ("publish", "raw"):
                    report[kind] = {}
                    for batch in (1, 100):
                        for clients in (1, 16):
                            tag = f"{kind}b{batch}c{clients}"
                            admin.create_topic(TopicId("bench", tag))
                            rate = drive(Load(stack.url, kind, batch, clients, seconds, tag))
                            report[kind][f"b{batch}c{clients}"] = round(rate)
                            print(
                                f"{kind:>7} batch {batch:>3} x {clients:>2} clients:"
                                f" {rate:>9.0f} msg/s",
                                flush=True,
                            )
            report["ping_floor"] = {
                str(c): round(drive(Load(stack.url, "ping", 1, c, seconds))) for c in (1, 16)
            }
            print(f"ping floor over http.client (requests/s): {report['ping_floor']}", flush=True)
            report["poll_msgs_per_s"] = round(
                bench_poll(stack.url, 20_000 if args.quick else 100_000)
            )
            print(f"poll: {report['poll_msgs_per_s']} msg/s", flush=True)
            report["latency_at_1000_per_s"] = bench_latency(stack, 3.0 if args.quick else 10.0)
            latency = report["latency_at_1000_per_s"]
            print(f"publish->visible (transactional long-poll consumer): {latency}", flush=True)
        finally:
            stack.stop()
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
