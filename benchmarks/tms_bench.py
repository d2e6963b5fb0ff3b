"""Messaging-core benchmark (in-process, LevelDB on local disk), beside raw plyvel.

Measured in one run:

* publish: 100-byte messages, requests of 1, 10 and 100 messages, 1/4/16 concurrent
  publishers on one topic, every request synced before it returns — beside raw plyvel
  ``write_batch(sync=True)`` of the same sizes and thread counts;
* fetch: reading 100-byte messages cold (a whole topic from the start) and at the tail
  (the newest 1000, from an id), with and without a transaction — beside a raw plyvel
  iterator over the same rows;
* publish to 4 and 16 topics at once, one publisher each, one message per request;
* transactional publish cycles (start, publish, commit; in-memory transaction manager in
  this process) with the write-pointer guard asking the manager, and with the clock
  check only: rate and CPU per cycle, alternately;
* fetch cost as the topic grows (10^4, 10^6, 10^7 messages): reading 1000 messages at the
  tail and in the middle (by time).

    python -m benchmarks.tms_bench [--quick] [--seconds S] [--sizes 10000,1000000,...]
                                   [--parts publish,topics,guard,fetch,growth]

Results: ``benchmarks/results/tms.json``; figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plyvel

from benchmarks.common import new_report, run_threads, write_report
from tms.fetcher import FetchRequest
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from txn.config import TxConfig
from txn.inmemory import InProcessTxClient
from txn.manager import TransactionManager
from txn.transaction import Transaction

RESULTS = Path(__file__).with_name("results")
PAYLOAD = os.urandom(50) + b"\x00" * 50
T = TopicId("bench", "t")


def bench_raw_put(root: Path, batch: int, threads: int, seconds: float) -> float:
    db = plyvel.DB(
        str(root / f"raw-{batch}-{threads}"), create_if_missing=True, write_buffer_size=64 << 20
    )
    seqs = [0] * threads

    def work(i: int) -> int:
        with db.write_batch(sync=True) as wb:
            for _ in range(batch):
                seqs[i] += 1
                wb.put(
                    b"bench:t:\x00\x00\x00\x01" + i.to_bytes(2, "big") + seqs[i].to_bytes(8, "big"),
                    PAYLOAD,
                )
        return batch

    rate = run_threads(threads, seconds, work).per_second
    db.close()
    return rate


def bench_publish(root: Path, batch: int, threads: int, seconds: float) -> float:
    svc = MessagingService(LevelDBStore(root / f"pub-{batch}-{threads}"))
    svc.create_topic(T)
    request = StoreRequest(T, [PAYLOAD] * batch)

    def work(_i: int) -> int:
        svc.publish(request)
        return batch

    rate = run_threads(threads, seconds, work).per_second
    svc.close()
    return rate


def bench_publish_topics(root: Path, topics: int, seconds: float) -> float:
    """One publisher per topic, one message per request: every topic's writer syncs on
    its own, and the store merges what they write at the same time into shared syncs."""
    svc = MessagingService(LevelDBStore(root / f"pub-topics-{topics}"))
    requests = []
    for i in range(topics):
        topic = TopicId("bench", f"t{i}")
        svc.create_topic(topic)
        requests.append(StoreRequest(topic, [PAYLOAD]))

    def work(i: int) -> int:
        svc.publish(requests[i])
        return 1

    rate = run_threads(topics, seconds, work).per_second
    svc.close()
    return rate


def bench_tx_publish(
    root: Path, batch: int, guarded: bool, seconds: float, run: int = 0
) -> dict[str, float]:
    """One thread: start a transaction (in-memory manager, in this process), publish
    ``batch`` messages under its write pointer, commit. ``guarded``: the service checks
    the pointer with the manager (``TransactionStateGuard``: a refresh for every new
    transaction), else only against the clock (``ClockGuard``). Rate and CPU per cycle."""
    # imported here: the other parts also run on checkouts from before tms.guard
    from tms.guard import TransactionStateGuard

    manager = TransactionManager(TxConfig())
    manager.start()
    client = InProcessTxClient(manager)
    guard = TransactionStateGuard(client) if guarded else None
    name = f"txpub-{batch}-{'guard' if guarded else 'clock'}-{run}"
    svc = MessagingService(LevelDBStore(root / name), guard=guard)
    svc.create_topic(T)
    payloads = [PAYLOAD] * batch
    cycles, begun, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - begun < seconds:
        tx = client.start_short()
        svc.publish(StoreRequest(T, payloads, tx.write_pointer))
        client.commit_or_throw(tx)
        cycles += 1
    elapsed, cpu = time.perf_counter() - begun, time.process_time() - cpu
    svc.close()
    manager.stop()
    return {"cycles_per_s": cycles / elapsed, "cpu_us_per_cycle": cpu / cycles * 1e6}


def _fill(svc: MessagingService, count: int) -> None:
    chunk = StoreRequest(T, [PAYLOAD] * 1000)
    for _ in range(count // 1000):
        svc.publish(chunk)


def _timed(fn: Callable[[], int], min_seconds: float = 0.3) -> float:
    """Items per second of ``fn`` (returns items), repeated for at least min_seconds."""
    items, begun = 0, time.perf_counter()
    while True:
        items += fn()
        elapsed = time.perf_counter() - begun
        if elapsed >= min_seconds:
            return items / elapsed


def bench_fetch(root: Path, count: int) -> dict[str, float]:
    path = root / "fetch"
    store = LevelDBStore(path)
    svc = MessagingService(store)
    svc.create_topic(T)
    _fill(svc, count)
    reader = Transaction(transaction_id=2**62, read_pointer=2**62, write_pointer=2**62)
    all_ids = svc.fetch(T, FetchRequest(limit=count)).messages
    tail_start = all_ids[-1000].id
    db = store.db

    def raw_scan() -> int:
        n = 0
        for _key, _value in db.iterator(prefix=b"m/bench:t:"):
            n += 1
        return n

    def raw_scan_list() -> int:
        return len(list(db.iterator(prefix=b"m/bench:t:")))

    def raw_tail() -> int:
        n = 0
        for _key, _value in db.iterator(prefix=b"m/bench:t:", reverse=True):
            n += 1
            if n == 1000:
                break
        return n

    results = {
        "raw_scan": _timed(raw_scan),
        "raw_scan_list": _timed(raw_scan_list),
        "fetch_cold": _timed(lambda: len(svc.fetch(T, FetchRequest(limit=count)).messages)),
        "fetch_cold_tx": _timed(
            lambda: len(svc.fetch(T, FetchRequest(limit=count, transaction=reader)).messages)
        ),
        "raw_tail_1000": _timed(raw_tail),
        "fetch_tail_1000": _timed(
            lambda: len(svc.fetch(T, FetchRequest(start_id=tail_start)).messages)
        ),
        "fetch_tail_1000_tx": _timed(
            lambda: len(
                svc.fetch(T, FetchRequest(start_id=tail_start, transaction=reader)).messages
            )
        ),
    }
    svc.close()
    shutil.rmtree(path, ignore_errors=True)
    return results


def bench_growth(root: Path, sizes: list[int]) -> dict[str, dict[str, float]]:
    """Fetch cost (ms per 1000 messages) at the tail and in the middle as the topic grows."""
    path = root / "growth"
    svc = MessagingService(LevelDBStore(path))
    svc.create_topic(T)
    out: dict[str, dict[str, float]] = {}
    stored = 0
    for size in sizes:
        _fill(svc, size - stored)
        stored = size
        first = svc.fetch(T, FetchRequest(limit=1)).messages[0].id
        newest = svc.fetch(T, FetchRequest(start_ms=svc.now_ms() - 5, limit=10**6)).messages
        tail_id = newest[max(0, len(newest) - 1000)].id if newest else first
        middle_ms = (first.publish_ms + tail_id.publish_ms) // 2

        def per_1000(request: FetchRequest) -> float:
            rate = _timed(lambda: len(svc.fetch(T, request).messages), 0.5)
            return round(1000 / rate * 1000, 3)

        out[str(size)] = {
            "tail_ms_per_1000": per_1000(FetchRequest(start_id=tail_id, limit=1000)),
            "middle_ms_per_1000": per_1000(FetchRequest(start_ms=middle_ms, limit=1000)),
        }
        print(f"  {size:>10,} stored: {out[str(size)]}", flush=True)
    svc.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument(
        "--sizes", default=None, help="comma-separated topic sizes for the growth test"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "tms.json")
    parser.add_argument(
        "--parts",
        default="publish,topics,guard,fetch,growth",
        help="comma-separated: publish (one topic), topics (16 topics at once), guard "
        "(transactional publish with and without the write-pointer guard), fetch, growth",
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    seconds = args.seconds or (1.0 if args.quick else 4.0)
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([10_000, 100_000] if args.quick else [10_000, 1_000_000, 10_000_000])
    )
    report: dict[str, Any] = new_report(
        "tms",
        message_bytes=len(PAYLOAD),
        publish={},
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        for batch in (1, 10, 100) if "publish" in parts else ():
            for threads in (1, 4, 16):
                raw = bench_raw_put(root, batch, threads, seconds)
                pub = bench_publish(root, batch, threads, seconds)
                report["publish"][f"batch{batch}_threads{threads}"] = {
                    "raw_plyvel_per_s": round(raw),
                    "tms_per_s": round(pub),
                    "ratio": round(pub / raw, 3),
                }
                line = (
                    f"batch {batch:>3} x {threads:>2} threads: tms {pub:>9.0f}/s raw {raw:>9.0f}/s"
                )
                print(f"publish {line} = {pub / raw:.0%}", flush=True)
        if "topics" in parts:
            for topics in (4, 16):
                rate = bench_publish_topics(root, topics, seconds)
                report["publish"][f"topics{topics}_batch1"] = {"tms_per_s": round(rate)}
                print(f"publish to {topics} topics at once, 1 per request: {rate:.0f}/s")
        if "guard" in parts:
            report["tx_publish"] = {}
            for batch in (1, 100):
                for run, guarded in enumerate((False, True) * 3):  # alternately, 3 times
                    r = bench_tx_publish(root, batch, guarded, seconds, run)
                    key = f"batch{batch}_{'guard' if guarded else 'clock'}"
                    report["tx_publish"].setdefault(key, []).append(
                        {k: round(v, 1) for k, v in r.items()}
                    )
                    print(
                        f"tx publish {key}: {r['cycles_per_s']:.0f}/s, "
                        f"{r['cpu_us_per_cycle']:.1f} us CPU per cycle",
                        flush=True,
                    )
        if "fetch" in parts:
            _fetch_report(root, report, 20_000 if args.quick else 200_000)
        if "growth" in parts:
            report["growth"] = bench_growth(root, sizes)
    write_report(args.out, report)
    return 0


def _fetch_report(root: Path, report: dict[str, Any], count: int) -> None:
    fetch = bench_fetch(root, count)
    report["fetch"] = {k: round(v) for k, v in fetch.items()}
    report["fetch"]["topic_messages"] = count
    report["fetch"]["cold_ratio"] = round(fetch["fetch_cold"] / fetch["raw_scan"], 3)
    report["fetch"]["cold_ratio_to_list"] = round(fetch["fetch_cold"] / fetch["raw_scan_list"], 3)
    report["fetch"]["tail_ratio"] = round(fetch["fetch_tail_1000"] / fetch["raw_tail_1000"], 3)
    print(f"fetch: {json.dumps(report['fetch'])}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
