"""What else the machine did while a point was measured.

The VM is shared, and the load average counts the benchmark's own processes, so it says
little. ``OtherCpu`` sums the CPU time (user + system, from ``/proc``) of every process
that is not the benchmark's: not in the harness's session (its workers, the txms stack,
``redis-server``), not a process tree added with ``own`` (``pg_ctl`` starts PostgreSQL
outside our session, and each PostgreSQL process makes a session of its own), and not a
kernel thread (their flushing and journalling is mostly the benchmark's own I/O). Over a
task, the growth of that sum divided by the task's wall time is how many CPUs others
used meanwhile.

An approximation: a process that exits between two readings takes its time with it, so
short-lived processes are undercounted; long-running ones (a JVM, a test run) are not.
On a system without ``/proc`` the figure is 0.0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OtherCpu", "Process", "processes", "ticks_outside"]

_KTHREADD = 2  # the parent of every kernel thread


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    session: int
    ticks: int
    """CPU time so far, user + system, in clock ticks."""


def processes() -> Iterator[Process]:
    """Every process of ``/proc`` (none without it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # the command name, in parentheses, may hold spaces: split after it
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields from the state on: state ppid pgrp session ... utime(11) stime(12)
        yield Process(
            int(stat.parent.name), int(fields[1]), int(fields[3]), int(fields[11]) + int(fields[12])
        )


def ticks_outside(procs: Iterable[Process], sessions: set[int], parents: set[int]) -> int:
    """The CPU ticks of the processes that are not ours (see the module docstring)."""
    ticks = 0
    for proc in procs:
        if proc.session in sessions or proc.pid in parents or proc.ppid in parents:
            continue  # ours
        if proc.session == 0 or proc.ppid == _KTHREADD:
            continue  # a kernel thread: its work (flushing, journalling) is mostly our I/O
        ticks += proc.ticks
    return ticks


def _cpu_seconds_outside(sessions: set[int], parents: set[int]) -> float:
    return ticks_outside(processes(), sessions, parents) / os.sysconf("SC_CLK_TCK")


class OtherCpu:
    """``start()`` then ``cpus()``: the CPUs other processes used in between."""

    def __init__(self) -> None:
        self.sessions = {os.getsid(0)}
        self.parents: set[int] = set()
        self._cpu = 0.0
        self._at = 0.0

    def own(self, pid: int) -> None:
        """Count ``pid``, its children and its session as the benchmark's own (a
        PostgreSQL server: each of its children starts a session of its own)."""
        self.sessions.add(os.getsid(pid))
        self.parents.add(pid)

    def _outside(self) -> float:
        return _cpu_seconds_outside(self.sessions, self.parents)

    def start(self) -> None:
        self._cpu = self._outside()
        self._at = time.monotonic()

    def cpus(self) -> float:
        elapsed = time.monotonic() - self._at
        used = self._outside() - self._cpu
        return round(max(0.0, used) / elapsed, 2) if elapsed > 0 else 0.0
