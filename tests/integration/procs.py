"""Run ``txn serve`` and ``tms serve`` as real child processes and learn their addresses
from their output (which is read all along: a full pipe would stall them)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from tms.client import MessagingClient
from tms.model import TopicId
from txms_common.retry import RetryNTimes
from txn.rpc.client import ThriftTxClient

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")
_TMS_LISTENING = re.compile(r"listening on (http://[\d.]+:\d+)")
RPC_LISTENING = re.compile(r"binary protocol listening on (tms://[\d.]+:\d+)")


class ServerProcess:
    def __init__(self, data_dir: Path | None, *extra: str, log_level: str = "WARNING") -> None:
        """``txn serve`` with its state in ``data_dir`` (None: ``--in-memory``)."""
        self.data_dir = data_dir
        self.extra = extra
        self.log_level = log_level
        self.proc: subprocess.Popen[str] | None = None
        self.address: tuple[str, int] | None = None
        self.output: list[str] = []

    def start(self, timeout_s: float = 30.0) -> tuple[str, int]:
        self.output = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txn", "--log-level", self.log_level, "serve",
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


class TmsServeProcess:
    """``tms serve`` on port 0 with ``extra`` arguments, in an environment with ``env``
    added; the port is new at every start."""

    def __init__(
        self,
        data_dir: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        listening: re.Pattern[str] = _TMS_LISTENING,
    ) -> None:
        """``listening`` finds the URL ``start`` returns in the output (by default the
        REST service's)."""
        self.data_dir = data_dir
        self.extra = extra
        self.env = env or {}
        self.listening = listening
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self, timeout_s: float = 30.0) -> str:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tms.cli", "--log-level", "WARNING", "serve",
             "--data-dir", str(self.data_dir), "--port", "0", *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )  # fmt: skip
        found: list[str] = []
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                match = self.listening.search(line)
                if match and not found:
                    found.append(match.group(1))
                    ready.set()
            ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not ready.wait(timeout_s) or not found:
            self.kill_if_running()
            raise RuntimeError("tms serve did not start:\n" + "".join(self.output))
        return found[0]

    def kill_if_running(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reap()

    def printed(self, pattern: re.Pattern[str], timeout_s: float = 10.0) -> str:
        """The first group of ``pattern``'s first match in the output (waiting for it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for line in list(self.output):
                if match := pattern.search(line):
                    return match.group(1)
            if time.monotonic() > deadline:
                raise RuntimeError(f"not printed: {pattern.pattern}\n" + "".join(self.output))
            time.sleep(0.02)

    def stop(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(30)
        self._reap()
        return code

    def _reap(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self._pump.join(10)
            self.proc.stdout.close()


class ProcessStack:
    """``txn serve`` and ``tms serve --tx-server`` (with ``extra`` arguments) as real
    processes with their state under ``root``, and a Thrift client of the first."""

    def __init__(self, root: Path, *extra: str, topics: Iterable[TopicId] = ()) -> None:
        self.txn = ServerProcess(root / "txn")
        host, port = self.txn.start()
        self.tx = ThriftTxClient((host, port), retry=RetryNTimes(2), timeout_s=10)
        self.tms = TmsServeProcess(root / "tms", "--tx-server", f"{host}:{port}", *extra)
        try:
            self.url = self.tms.start()
            with MessagingClient(self.url) as client:
                for topic in topics:
                    client.create_topic(topic)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ProcessStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def restart_tms(self) -> None:
        self.url = self.tms.start()

    def close(self) -> None:
        self.tx.close()
        if self.tms.proc is not None and self.tms.proc.poll() is None:
            self.tms.proc.send_signal(signal.SIGCONT)  # a test may have left it stopped
        self.tms.kill_if_running()
        self.txn.kill()
