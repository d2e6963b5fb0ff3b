"""Where the time of publish → visible goes, over the binary protocol, at a fixed rate.

    python -m benchmarks.rpc_latency [--rates 1000,5000,10000] [--seconds 5]

The setting of the peer harness's latency workload for ``txms-rpc``
(``benchmarks.peers``, ``measure_latency``): the standalone stack in a child process, a
paced ``tms.aio`` sender in another (one message per publish, 100 B, not waiting for
each answer; it wakes every ``TICK_S`` and sends what is due, so the connection's
frames of one wake-up leave in one ``send``), and here a consumer following the topic
transactionally with long polls (``MessagingClient.follow``, ``wait_ms`` 1000). Each
message carries the time it was due by the rate (so the wait for its tick, and any lag
of the sender behind its schedule, count in its latency); the sender also notes when
each answer came back. Per rate, in ms (p50 / p99):

* ``acked``: due → the sender holds the answer (the tick, the sender's loop, the
  server's queueing and group commit, the answer's way back);
* ``server``: the server's own time for a publish, from the loop turn that read it to
  its answer (``tms_operation_seconds``), and for each synced batch
  (``tms_writer_batch_seconds``): quantiles from the histograms' buckets (upper bounds);
* ``seen``: due → the consumer holds the message;
* ``seen - acked``: per message (negative: the consumer had it before the sender read
  its answer): the long poll's wake-up, its read and answer, the consumer;
* the CPU each process used per message.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import tempfile
import time
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.peers.workloads import latency_payload, percentile
from benchmarks.rpc_cpu import cpu_s
from tms.aio import AsyncMessagingClient
from tms.client import MessagingClient
from tms.model import TopicId
from tms.standalone import Launched
from txn.rpc.client import ThriftTxClient

_SIZE = 100


TICK_S = 0.001
"""The paced sender wakes once a millisecond (the resolution of the loop's timers) and
sends every message due by then: no timer, task or extra loop pass per message."""


def _send(url: str, topic: TopicId, rate: int, count: int, out: Any) -> None:
    """The paced sender (a child process): for each message the time it was due and the
    time its answer came back, in ns. A message carries its due time, so a sender that
    falls behind its schedule (or holds a message until its tick) counts against the
    latency rather than hiding it."""

    async def paced() -> list[tuple[int, int]]:
        client = AsyncMessagingClient(url)
        await client.ping()
        times: list[tuple[int, int]] = []
        errors: list[BaseException] = []
        finished = asyncio.get_running_loop().create_future()

        def answered(due_ns: int, answer: asyncio.Future[object]) -> None:
            if (error := answer.exception()) is not None:
                errors.append(error)
            times.append((due_ns, time.time_ns()))
            if len(times) == count and not finished.done():
                finished.set_result(None)

        start, start_ns, sent = time.perf_counter(), time.time_ns(), 0
        while sent < count:
            elapsed = time.perf_counter() - start
            due = min(count, int(elapsed * rate) + 1)
            while sent < due:
                due_ns = start_ns + sent * 1_000_000_000 // rate
                answer = client.publish_nowait(topic, [latency_payload(_SIZE, due_ns)])
                answer.add_done_callback(partial(answered, due_ns))
                sent += 1
            await asyncio.sleep(TICK_S - elapsed % TICK_S)
        await finished
        await client.close()
        if errors:
            raise errors[0]
        return times

    times = asyncio.run(paced())
    out.send((times, time.process_time()))


def _histogram(text: str, name: str, labels: str = "") -> dict[float, float]:
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{") and labels in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[math.inf if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return buckets


def _quantile(after: dict[float, float], before: dict[float, float], q: float) -> float:
    """The bucket upper bound (ms) the ``q`` quantile of the observations between two
    scrapes falls in."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1] if counts else 0.0
    for le, cumulative in counts:
        if total and cumulative >= q * total:
            return le * 1000
    return math.nan


def _ms(values: list[float]) -> str:
    values.sort()
    return f"{percentile(values, 0.5):8.2f} / {percentile(values, 0.99):8.2f}"


def measure(stack: Launched, rate: int, seconds: float) -> None:
    topic = TopicId("bench", f"latency_{rate}")
    admin = MessagingClient(stack.url)
    admin.create_topic(topic)
    count = int(rate * seconds)
    client = MessagingClient(stack.rpc_url)
    tx_client = ThriftTxClient(stack.tx_address, client_id="bench-follower")
    tx_client.status()

    def scrape() -> str:
        with urllib.request.urlopen(f"{stack.url}/metrics") as answer:
            return str(answer.read().decode())

    before = scrape()
    theirs, ours = multiprocessing.Pipe(duplex=False)
    sender = multiprocessing.get_context("fork").Process(
        target=_send, args=(stack.rpc_url, topic, rate, count, ours)
    )
    cpu_before, server_before = time.process_time(), cpu_s(stack.proc.pid)
    deadline = time.monotonic() + seconds + 30
    seen: dict[int, int] = {}
    sender.start()
    for _id, payload in client.follow(
        topic, start=0, tx_client=tx_client, wait_ms=1000, stop=lambda: time.monotonic() > deadline
    ):
        seen[int.from_bytes(payload[:8], "big")] = time.time_ns()
        if len(seen) >= count:
            break
    consumer_cpu = time.process_time() - cpu_before
    times, sender_cpu = theirs.recv()
    sender.join(30)
    server_cpu = cpu_s(stack.proc.pid) - server_before
    after = scrape()
    client.close()
    tx_client.close()
    admin.delete_topic(topic)
    admin.close()
    acked = [(a - s) / 1e6 for s, a in times]
    seen_ms = [(seen[s] - s) / 1e6 for s, _ in times if s in seen]
    gap = [(seen[s] - a) / 1e6 for s, a in times if s in seen]
    op, batch = "tms_operation_seconds", "tms_writer_batch_seconds"
    server = [
        _quantile(_histogram(after, op, 'op="publish"'), _histogram(before, op, 'op="publish"'), q)
        for q in (0.5, 0.99)
    ]
    synced = [
        _quantile(_histogram(after, batch), _histogram(before, batch), q) for q in (0.5, 0.99)
    ]
    print(f"rate {rate:,}/s, {len(seen):,} of {count:,} messages seen (p50 / p99, ms)")
    print(f"  acked          {_ms(acked)}")
    print(f"  server publish ≤{server[0]:7.2f} / ≤{server[1]:7.2f}")
    print(f"  server batch   ≤{synced[0]:7.2f} / ≤{synced[1]:7.2f}")
    print(f"  seen           {_ms(seen_ms)}")
    print(f"  seen - acked   {_ms(gap)}")
    per = 1e6 / count
    print(
        f"  CPU µs/message: sender {sender_cpu * per:.1f}, server (with the transaction "
        f"server) {server_cpu * per:.1f}, consumer {consumer_cpu * per:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,5000,10000")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Launched(Path(tmp) / "stack") as stack:
        print(f"load average {os.getloadavg()[0]:.1f}")
        for rate in (int(r) for r in args.rates.split(",")):
            measure(stack, rate, args.seconds)


if __name__ == "__main__":
    main()
