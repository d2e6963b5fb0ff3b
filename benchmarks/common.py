"""Shared benchmark machinery."""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tms.service import MessagingService
    from tms.store.subscriptions import KvSubscriptionStore

__all__ = ["ThreadRun", "leveldb_service", "new_report", "run_threads", "write_report"]


def new_report(name: str, **fields: Any) -> dict[str, Any]:
    """A result file's head: which benchmark, when, on what machine; then ``fields``."""
    return {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        **fields,
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")


@contextmanager
def leveldb_service() -> Iterator[tuple[MessagingService, KvSubscriptionStore]]:
    """An in-process service on a LevelDB store in a temporary directory, with its
    subscription records on the same store (their counters readable); closed and
    removed on leaving."""
    from tms.config import TmsConfig
    from tms.service import MessagingService
    from tms.store.leveldb import LevelDBStore
    from tms.store.subscriptions import KvSubscriptionStore

    with tempfile.TemporaryDirectory() as tmp:
        kv = LevelDBStore(Path(tmp) / "db")
        records = KvSubscriptionStore(kv)
        svc = MessagingService(kv, TmsConfig(), subscription_store=records)
        try:
            yield svc, records
        finally:
            svc.close()


@dataclass
class ThreadRun:
    items: int
    seconds: float
    latencies: list[float] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.items / self.seconds if self.seconds else 0.0


def run_threads(
    threads: int, seconds: float, work: Callable[[int], int], *, latencies: bool = False
) -> ThreadRun:
    """Call ``work(thread_index)`` (returns items done) in ``threads`` threads, all starting
    together, for ``seconds``; optionally time every call."""
    counts = [0] * threads
    samples: list[list[float]] = [[] for _ in range(threads)]
    go = threading.Barrier(threads + 1)
    deadline = [0.0]

    def loop(i: int) -> None:
        go.wait()
        done = 0
        mine = samples[i]
        while (t0 := time.perf_counter()) < deadline[0]:
            done += work(i)
            if latencies:
                mine.append(time.perf_counter() - t0)
        counts[i] = done

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    deadline[0] = time.perf_counter() + seconds
    begun = time.perf_counter()
    go.wait()
    for w in workers:
        w.join()
    return ThreadRun(
        sum(counts), time.perf_counter() - begun, sorted(x for s in samples for x in s)
    )
