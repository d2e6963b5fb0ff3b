"""Shared benchmark machinery."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ThreadRun", "run_threads"]


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
