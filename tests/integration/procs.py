"""Run ``txn serve`` as a real child process and learn its address from its output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")


class ServerProcess:
    def __init__(self, data_dir: Path | None, *extra: str) -> None:
        """``txn serve`` with its state in ``data_dir`` (None: ``--in-memory``)."""
        self.data_dir = data_dir
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None
        self.address: tuple[str, int] | None = None
        self.output: list[str] = []

    def start(self, timeout_s: float = 30.0) -> tuple[str, int]:
        self.output = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txn", "--log-level", "WARNING", "serve",
             *(("--data-dir", str(self.data_dir)) if self.data_dir else ("--in-memory",)),
             "--port", "0", *self.extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                match = _LISTENING.search(line)
                if match:
                    self.address = (match.group(1), int(match.group(2)))
                    ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not ready.wait(timeout_s):
            self.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.output))
        assert self.address is not None
        return self.address

    def terminate(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        self._reap()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self._pump.join(10)
            self.proc.stdout.close()
