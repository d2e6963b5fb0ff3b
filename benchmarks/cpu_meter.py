"""CPU seconds per process kind over a measured window, read from ``/proc``.

The processes counted: the server process and its descendants (``server``); this
process (``driver_py``: the benchmark's client, or PySpark's driver); its other
descendants and the processes of the given sessions (a standalone cluster's), sorted by
what they run: Spark's driver JVM (``driver_jvm``, in ``local[N]`` the executor too),
executor JVMs (``executor_jvm``), the Master and Worker daemons (``daemon_jvm``), and
Python workers (``python_workers``, PySpark's daemon and the workers it forks).

Each process counts its own time plus that of the children it has reaped (``cutime``,
``cstime``), so workers that exit within the window are not lost (see ``used``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["KINDS", "CpuMeter"]

_TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("server", "driver_py", "driver_jvm", "executor_jvm", "daemon_jvm", "python_workers")


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _processes() -> dict[int, list[str]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            out[int(entry.name)] = stat
    return out


def _cpu(stat: list[str]) -> float:
    # utime + stime + cutime + cstime (fields 14-17; the split starts at field 3)
    return sum(int(v) for v in stat[11:15]) / _TICK


def _descendants(root: int, children: dict[int, list[int]], stop: int | None) -> set[int]:
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid != stop and pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


class CpuMeter:
    """See the module docstring."""

    def __init__(self, server_pid: int, sessions: set[int] | None = None) -> None:
        self.server_pid = server_pid
        self.sessions = sessions or set()
        self._kinds: dict[int, str] = {}

    def _kind(self, pid: int) -> str:
        kind = self._kinds.get(pid)
        if kind is None:
            cmd = _cmdline(pid)
            if "java" not in cmd.split(" ", 1)[0]:
                kind = "python_workers"
            elif "CoarseGrainedExecutorBackend" in cmd:
                kind = "executor_jvm"
            elif "deploy.master.Master" in cmd or "deploy.worker.Worker" in cmd:
                kind = "daemon_jvm"
            else:
                kind = "driver_jvm"
            self._kinds[pid] = kind
        return kind

    def sample(self) -> dict[int, tuple[str, float, int]]:
        """Per process counted now: (kind, CPU seconds so far, parent pid)."""
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, stat in procs.items():
            children.setdefault(int(stat[1]), []).append(pid)
        me = os.getpid()
        server = _descendants(self.server_pid, children, None)
        side = _descendants(me, children, self.server_pid) - server
        side |= {p for p, s in procs.items() if int(s[3]) in self.sessions} - server
        out = {pid: ("server", _cpu(procs[pid]), int(procs[pid][1])) for pid in server}
        for pid in side:
            kind = "driver_py" if pid == me else self._kind(pid)
            out[pid] = (kind, _cpu(procs[pid]), int(procs[pid][1]))
        return out

    @staticmethod
    def used(
        before: dict[int, tuple[str, float, int]], after: dict[int, tuple[str, float, int]]
    ) -> dict[str, float]:
        """CPU seconds per kind between two samples. A process gone by ``after`` was
        reaped: by a counted parent, whose children's time now holds all of its own
        (so its time at ``before`` is taken off), or by one not counted (then its time
        since ``before`` is lost, and nothing is taken off)."""
        out = dict.fromkeys(KINDS, 0.0)
        for kind, cpu, _ in after.values():
            out[kind] += cpu
        for pid, (kind, cpu, parent) in before.items():
            if pid in after or parent in after:
                out[kind] -= cpu
        return out

    def settle(
        self, *, idle_cpu: float = 0.05, window_s: float = 1.0, limit_s: float = 300.0
    ) -> float:
        """Wait until the server is idle: its CPU below ``idle_cpu`` cores over two
        ``window_s`` windows in a row (LevelDB compacts in the background, after the
        writes that made the work); seconds waited, at most ``limit_s``."""
        started = time.perf_counter()
        quiet = 0
        last = _stat(self.server_pid)
        while quiet < 2 and time.perf_counter() - started < limit_s:
            time.sleep(window_s)
            now = _stat(self.server_pid)
            if now is None or last is None:
                break
            quiet = quiet + 1 if _cpu(now) - _cpu(last) < idle_cpu * window_s else 0
            last = now
        return time.perf_counter() - started

    @contextmanager
    def measure(self, *, settle: bool = False) -> Iterator[dict[str, float]]:
        """Yields a dict filled at the end: ``seconds``, CPU seconds per kind, ``load``.
        ``settle``: the server is let settle (``settle``) before the window opens and
        before it closes, so the background work (compactions) a workload leaves is
        charged to it, not to the next; ``settled_s`` is the wait at the end, not in
        ``seconds``."""
        out: dict[str, float] = {}
        if settle:
            self.settle()
        before = self.sample()
        started = time.perf_counter()
        yield out
        out["seconds"] = time.perf_counter() - started
        if settle:
            out["settled_s"] = self.settle()
        out.update(self.used(before, self.sample()))
        out["load"] = os.getloadavg()[0]
