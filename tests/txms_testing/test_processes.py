"""``ServiceProcess``: fault injection on our own services as child processes."""

from __future__ import annotations

import sys
from pathlib import Path

from txms_testing import ServiceProcess

_SPINNERS = """
import threading
def spin():
    while True:
        pass
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
print("spinning", flush=True)
spin()
"""


def thread_states(pid: int) -> list[str]:
    """The scheduler state of each thread of ``pid`` (``T``: stopped)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        text = stat.read_text()
        states.append(text[text.rindex(")") + 2])
    return states


def test_pause_returns_only_once_every_thread_is_stopped() -> None:
    # Given a process whose four threads are all running
    proc = ServiceProcess([sys.executable, "-c", _SPINNERS], "spinners").start()
    try:
        proc.wait_for("spinning")
        for _ in range(20):
            # When it is paused: SIGSTOP is delivered asynchronously, and a thread that
            # is still running could still answer a request
            proc.pause()
            # Then no thread runs any more once pause() has returned
            states = thread_states(proc.pid)
            assert len(states) == 4 and set(states) <= {"T", "t"}, states
            proc.resume()
            assert proc.running
    finally:
        proc.kill()
