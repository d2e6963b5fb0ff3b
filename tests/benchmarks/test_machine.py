"""What else the machine did: CPU time of processes outside the benchmark's sessions."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.peers.machine import OtherCpu


def burn(seconds: float) -> subprocess.Popen[bytes]:
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_a_busy_process_in_another_session_is_counted() -> None:
    # Given a process in a session of its own, busy for a while
    other = OtherCpu()
    busy = burn(1.0)
    time.sleep(0.1)
    # When the CPU others use is measured over most of its run
    other.start()
    time.sleep(0.6)
    used = other.cpus()
    busy.wait()
    # Then it shows (about one CPU; the bound leaves room for a loaded machine)
    assert used > 0.2


def test_a_process_made_our_own_is_not_counted() -> None:
    busy = burn(1.0)
    other = OtherCpu()
    other.own(busy.pid)
    time.sleep(0.1)
    other.start()
    time.sleep(0.4)
    assert os.getsid(busy.pid) in other.sessions
    used = other.cpus()
    busy.wait()
    assert used < 0.9
