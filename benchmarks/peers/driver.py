"""Closed-loop load: N callers, each making its next call when the last one returned.

Callers are spread over up to four forked worker processes (threads in each), as in
``benchmarks.http_bench``, so the client side of every system gets the same CPU share
and no one Python process's GIL caps it; a system that cannot be forked (an open
in-process database) runs its callers as threads of this process. Inside each process
``benchmarks.common.run_threads`` times the calls; every caller connects before the
common start, so connecting is not measured.

Also here: ``spawn``, which runs one function beside the caller (a process or a thread,
by the same rule), for the paced publisher of the latency workload.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.common import run_threads
from benchmarks.peers.base import Call

__all__ = ["MAX_PROCESSES", "Rate", "Spawned", "drive", "spawn", "spread"]

MAX_PROCESSES = 4
_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Rate:
    items: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.items / self.seconds if self.seconds else 0.0


def spread(callers: int, processes: int = MAX_PROCESSES) -> list[int]:
    """How many callers each worker process runs: as even as possible, at most
    ``processes`` processes, none empty."""
    if callers < 1:
        raise ValueError("at least one caller")
    n = min(callers, processes)
    return [callers // n + (1 if i < callers % n else 0) for i in range(n)]


def _run_calls(calls: list[Call], seconds: float) -> Rate:
    """``run_threads`` over the calls; the first failure of any call is raised after the
    run as ``RuntimeError`` with its traceback (a caller that failed idles meanwhile)."""
    errors: list[str] = []
    failed = [False] * len(calls)

    def work(i: int) -> int:
        if failed[i]:
            time.sleep(0.01)
            return 0
        try:
            return calls[i]()
        except Exception:
            failed[i] = True
            errors.append(traceback.format_exc())
            return 0

    run = run_threads(len(calls), seconds, work)
    if errors:
        raise RuntimeError("a call failed:\n" + errors[0])
    return Rate(run.items, run.seconds)


def _worker(  # noqa: PLR0917 - a multiprocessing target takes positional arguments
    make_call: Callable[[int], Call],
    first: int,
    threads: int,
    seconds: float,
    barrier: Any,
    out: Any,
) -> None:
    try:
        calls = [make_call(first + i) for i in range(threads)]
        barrier.wait(_TIMEOUT_S)
        rate = _run_calls(calls, seconds)
        out.put(("ok", rate.items, rate.seconds))
    except threading.BrokenBarrierError:
        out.put(("aborted", traceback.format_exc(), 0.0))  # another worker failed
    except BaseException:
        barrier.abort()
        out.put(("error", traceback.format_exc(), 0.0))


def drive(make_call: Callable[[int], Call], callers: int, seconds: float, *, forks: bool) -> Rate:
    """Items per second of ``callers`` closed-loop callers for ``seconds``.

    ``make_call(i)`` builds caller ``i``'s call (``0 <= i < callers``) in the process that
    will use it, before the timed start; a failure in any worker process is raised here
    as ``RuntimeError`` with its traceback."""
    if not forks:
        return _run_calls([make_call(i) for i in range(callers)], seconds)
    ctx = mp.get_context("fork")
    shares = spread(callers)
    barrier = ctx.Barrier(len(shares))
    out = ctx.Queue()
    procs = []
    first = 0
    for share in shares:
        procs.append(
            ctx.Process(target=_worker, args=(make_call, first, share, seconds, barrier, out))
        )
        first += share
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=seconds + _TIMEOUT_S) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    # the failure itself first, before the workers it left waiting at the barrier
    errors = [r[1] for r in results if r[0] == "error"] + [
        r[1] for r in results if r[0] == "aborted"
    ]
    if errors:
        raise RuntimeError("a load worker failed:\n" + errors[0])
    return Rate(sum(r[1] for r in results), max(r[2] for r in results))


class Spawned:
    """A function running beside the caller; ``join`` waits for it and re-raises its
    failure as ``RuntimeError``."""

    def __init__(self, fn: Callable[[], None], *, forks: bool) -> None:
        self._error: str | None = None
        if forks:
            ctx = mp.get_context("fork")
            self._queue: Any = ctx.Queue()
            self._runner: Any = ctx.Process(target=self._run, args=(fn, self._queue))
        else:
            self._queue = None
            self._runner = threading.Thread(target=self._run, args=(fn, None))
        self._runner.start()

    def _run(self, fn: Callable[[], None], queue: Any) -> None:
        try:
            fn()
            error = None
        except BaseException:
            error = traceback.format_exc()
        if queue is not None:
            queue.put(error)
        else:
            self._error = error

    def join(self, timeout_s: float) -> None:
        if self._queue is not None:
            self._error = self._queue.get(timeout=timeout_s)
        self._runner.join(timeout_s)
        if self._error is not None:
            raise RuntimeError("a background worker failed:\n" + self._error)


def spawn(fn: Callable[[], None], *, forks: bool) -> Spawned:
    return Spawned(fn, forks=forks)
