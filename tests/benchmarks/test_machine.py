"""What else the machine did: which processes' CPU time counts as others'. Behaviour
only: which processes are counted, never how much CPU anything got."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from benchmarks.peers.machine import OtherCpu, Process, processes, ticks_outside

KTHREADD = 2


def test_only_processes_outside_our_sessions_and_trees_count() -> None:
    ours, owned = 100, 500
    procs = [
        Process(pid=10, ppid=1, session=ours, ticks=1),  # our session
        Process(pid=owned, ppid=1, session=600, ticks=2),  # a tree we own (its root)
        Process(pid=501, ppid=owned, session=601, ticks=4),  # its child, own session
        Process(pid=20, ppid=KTHREADD, session=0, ticks=8),  # a kernel thread
        Process(pid=30, ppid=1, session=300, ticks=16),  # someone else's
        Process(pid=31, ppid=30, session=300, ticks=32),  # someone else's child
    ]
    assert ticks_outside(procs, {ours}, {owned}) == 16 + 32


def _burner() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)


def _record(pid: int) -> Process:
    """The burner's /proc record once it has used CPU (waits as long as that takes)."""
    while True:
        found = [p for p in processes() if p.pid == pid]
        if found and found[0].ticks > 0:
            return found[0]
        time.sleep(0.01)


def test_a_process_in_another_session_counts_until_made_our_own() -> None:
    busy = _burner()
    try:
        record = _record(busy.pid)
        os.kill(busy.pid, signal.SIGSTOP)  # its CPU time stands still from here
        other = OtherCpu()
        assert record.session == busy.pid != os.getsid(0)
        assert ticks_outside([record], other.sessions, other.parents) == record.ticks
        other.own(busy.pid)
        assert os.getsid(busy.pid) in other.sessions
        assert ticks_outside([record], other.sessions, other.parents) == 0
    finally:
        busy.kill()
        busy.wait()
