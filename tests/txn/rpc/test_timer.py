"""LoopTimer: one-shot, never before its deadline (uvloop's own timers fire sub-millisecond
deadlines at once), cancel and re-arm, and the call_later fallback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from txms_common.loop import new_event_loop
from txn.rpc import timer as timer_module
from txn.rpc.timer import LoopTimer


@pytest.fixture(params=["server loop", "asyncio"])
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    """The server's loop (uvloop where installed) and asyncio's own."""
    new: Callable[[], asyncio.AbstractEventLoop] = (
        new_event_loop if request.param == "server loop" else asyncio.new_event_loop
    )
    loop = new()
    yield loop
    loop.close()


def _run_until(loop: asyncio.AbstractEventLoop, done: Callable[[], bool], limit_s: float) -> None:
    async def wait() -> None:
        end = time.monotonic() + limit_s
        while not done() and time.monotonic() < end:
            await asyncio.sleep(0.001)

    loop.run_until_complete(wait())


def test_fires_once_and_never_before_a_sub_millisecond_deadline(
    loop: asyncio.AbstractEventLoop,
) -> None:
    fired: list[float] = []
    timer = LoopTimer(loop, lambda: fired.append(time.monotonic()))
    assert timer.precise  # Linux: a timerfd
    late = []
    for _ in range(30):
        fired.clear()
        deadline = time.monotonic() + 0.0004
        timer.arm(deadline)
        assert timer.armed
        _run_until(loop, lambda: bool(fired), 5.0)
        _run_until(loop, lambda: False, 0.002)  # would a second call come?
        assert len(fired) == 1 and not timer.armed
        late.append(fired[0] - deadline)
    timer.close()
    assert min(late) >= 0


def test_uvloop_call_later_fires_sub_millisecond_deadlines_early() -> None:
    """Why LoopTimer exists: uvloop rounds a delay to whole milliseconds, so
    call_later(0.4 ms) is a call_soon (a plain handle with no deadline at all)."""
    pytest.importorskip("uvloop")
    loop = new_event_loop()

    async def schedule() -> tuple[object, object]:
        running = asyncio.get_running_loop()
        return running.call_later(0.0004, lambda: None), running.call_later(0.002, lambda: None)

    sub_ms, two_ms = loop.run_until_complete(schedule())
    loop.close()
    assert not hasattr(sub_ms, "when")  # runs on the next iteration, whenever that is
    assert hasattr(two_ms, "when")


def test_cancel_and_rearm(loop: asyncio.AbstractEventLoop) -> None:
    fired: list[float] = []
    timer = LoopTimer(loop, lambda: fired.append(time.monotonic()))
    timer.arm(time.monotonic() + 0.002)
    timer.cancel()
    assert not timer.armed
    _run_until(loop, lambda: False, 0.02)
    assert fired == []
    # Re-arming replaces the deadline: the far one never fires, the near one once.
    timer.arm(time.monotonic() + 60)
    near = time.monotonic() + 0.001
    timer.arm(near)
    _run_until(loop, lambda: bool(fired), 5.0)
    _run_until(loop, lambda: False, 0.01)
    assert len(fired) == 1 and fired[0] >= near
    timer.close()
    timer.close()  # idempotent


def test_without_timerfd_it_falls_back_to_call_later(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timer_module, "_LIBC", None)
    fired: list[float] = []
    timer = LoopTimer(loop, lambda: fired.append(time.monotonic()))
    assert not timer.precise
    timer.arm(time.monotonic() + 0.002)
    timer.cancel()
    _run_until(loop, lambda: False, 0.02)
    assert fired == []
    timer.arm(time.monotonic() + 0.001)
    _run_until(loop, lambda: bool(fired), 5.0)
    assert len(fired) == 1
    timer.close()
