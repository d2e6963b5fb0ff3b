"""Our own services (``txn serve``, ``tms serve``) as child processes whose output is
followed line by line, for fault injection: ``kill()`` is ``SIGKILL``, ``pause()`` and
``resume()`` are ``SIGSTOP`` and ``SIGCONT`` (``pause()`` returns once every thread of
the process has stopped).

``wait_for(pattern, timeout_s)`` returns the match of the first output line (since the
given line index) matching ``pattern``, or raises ``EngineError`` with the output.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from txms_testing.errors import EngineError

__all__ = ["ServiceProcess", "txn_command"]


def txn_command(*args: str, log_level: str = "WARNING") -> list[str]:
    """``python -m txn --log-level L ARGS...`` with this interpreter."""
    return [sys.executable, "-m", "txn", "--log-level", log_level, *args]


class ServiceProcess:
    """See the module docstring."""

    def __init__(self, argv: Sequence[str], name: str = "") -> None:
        self.argv = list(argv)
        self.name = name or os.path.basename(self.argv[0])
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._pump: threading.Thread | None = None

    def start(self) -> ServiceProcess:
        self.lines = []
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._pump = threading.Thread(target=self._read, name=f"{self.name}-out", daemon=True)
        self._pump.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_for(self, pattern: str, timeout_s: float = 30.0, since: int = 0) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        seen = since
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    match = regex.search(line)
                    if match:
                        return match
                seen = len(self.lines)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.running:
                    break
                self._cond.wait(min(remaining, 0.5))
        raise EngineError(
            f"{self.name}: no output matching {pattern!r} within {timeout_s} s "
            f"(running: {self.running}):\n{self.output()}"
        )

    def output(self, last: int = 60) -> str:
        with self._cond:
            return "".join(self.lines[-last:])

    def signal(self, signum: int) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def pause(self, timeout_s: float = 10.0) -> None:
        """``SIGSTOP``, returning once every thread of the process is stopped.

        ``kill()`` only queues the signal: on a loaded machine a thread of the process can
        go on running for tens of milliseconds after it returned (serving a request the
        test meant to reach a paused process). Raises ``EngineError`` when the process has
        not stopped within ``timeout_s``."""
        self.signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout_s
        while self.running and not self._stopped():
            if time.monotonic() > deadline:
                raise EngineError(f"{self.name}: not stopped {timeout_s} s after SIGSTOP")
            time.sleep(0.001)

    def _stopped(self) -> bool:
        """Whether every thread is stopped (``T`` in ``/proc/<pid>/task/*/stat``; where
        there is no ``/proc``, assumed)."""
        tasks = f"/proc/{self.pid}/task"
        try:
            names = os.listdir(tasks)
        except FileNotFoundError:
            return not os.path.isdir("/proc/self")  # gone (reaped), or no /proc at all
        for name in names:
            try:
                with open(f"{tasks}/{name}/stat", encoding="ascii", errors="replace") as f:
                    stat = f.read()
            except FileNotFoundError:
                continue  # a thread that has just exited
            if stat[stat.rindex(")") + 2] not in "Tt":
                return False
        return True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """``SIGKILL`` and reap."""
        if self.proc is not None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.proc.wait(30)
            self._reap()

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """``SIGTERM`` (``SIGKILL`` after ``timeout_s``) and reap; the exit code."""
        if self.proc is None:
            return None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        self._reap()
        return code

    def _reap(self) -> None:
        if self._pump is not None:
            self._pump.join(10)
            self._pump = None
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
