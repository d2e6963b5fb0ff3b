"""The latency workload's paced sender, for rates a caller cannot reach one answer at
a time: it keeps the offered rate and yields to its event loop between sends."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from benchmarks.peers.base import SystemBase, Workload
from benchmarks.peers.workloads import measure_latency


class _TurnBuffered:
    """A sender that, like ``tms.aio``'s connections, sends what was asked for in one
    turn of the loop at the end of that turn; each send costs ``cost_s`` of the
    caller's time, so at a high rate the sender is always behind."""

    def __init__(self, delivered: queue.Queue[list[bytes]], cost_s: float) -> None:
        self._delivered = delivered
        self._cost_s = cost_s
        self._outbox: list[bytes] = []

    def send(self, payload: bytes) -> Awaitable[Any]:
        time.sleep(self._cost_s)
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(payload)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    def _flush(self) -> None:
        out, self._outbox = self._outbox, []
        self._delivered.put(out)

    async def close(self) -> None:
        return None


class TurnBufferedSystem(SystemBase):
    name = "turn-buffered"
    forks = False
    sends_async = True
    workloads = frozenset({Workload.LATENCY})

    def __init__(self, cost_s: float) -> None:
        self.flushes: list[int] = []
        self._delivered: queue.Queue[list[bytes]] = queue.Queue()
        self._cost_s = cost_s

    def create_topic(self, topic: str) -> None:
        return None

    async def async_sender(self, topic: str) -> _TurnBuffered:
        return _TurnBuffered(self._delivered, self._cost_s)

    def subscribe(self, topic: str, stop: Callable[[], bool]) -> Iterator[bytes]:
        while not stop():
            try:
                out = self._delivered.get(timeout=0.05)
            except queue.Empty:
                continue
            self.flushes.append(len(out))
            yield from out


def test_a_sender_behind_its_rate_still_lets_each_pass_leave() -> None:
    # 100 messages at 10,000/s, each send taking 1 ms: behind from the first message.
    # A sender that sent on without yielding would hand all 100 over in one flush.
    system = TurnBufferedSystem(cost_s=0.001)
    result = measure_latency(system, "t", 100, rate=10_000, seconds=0.01, wait=False)
    assert result["messages"] == 100
    assert sum(system.flushes) == 100
    assert len(system.flushes) >= 3
    assert system.flushes[0] == 1  # the first pass: only the first message was due


def test_a_sender_ahead_of_its_rate_sends_what_is_due() -> None:
    system = TurnBufferedSystem(cost_s=0.0)
    result = measure_latency(system, "t", 100, rate=2_000, seconds=0.05, wait=False)
    assert result["messages"] == 100
    assert len(system.flushes) > 10  # paced over ~50 ms, not sent at once
