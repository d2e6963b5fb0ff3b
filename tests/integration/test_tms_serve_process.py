"""``tms serve`` as a process, killed with SIGKILL under publish load over HTTP and over
the binary protocol: every acknowledged message is there after a restart, no request
half-written; SIGTERM exits 0."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tms.client import MessagingClient
from tms.errors import TmsError, TopicAlreadyExistsError
from tms.model import TopicId

T = TopicId("ns", "load")
_LISTENING = re.compile(r"listening on (http://[\d.]+:\d+)")
_RPC_LISTENING = re.compile(r"binary protocol listening on (tms://[\d.]+:\d+)")


class Serve:
    def __init__(self, data_dir: Path, *, rpc: bool = False) -> None:
        self.data_dir = data_dir
        self.rpc = rpc
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> str:
        """The URL the load goes to (``tms://`` with ``rpc``)."""
        rpc = ("--rpc-port", "0") if self.rpc else ()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tms.cli", "--log-level", "WARNING", "serve",
             "--data-dir", str(self.data_dir), "--port", "0", *rpc],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        pattern = _RPC_LISTENING if self.rpc else _LISTENING
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            match = pattern.search(line)
            if match:
                return match.group(1)
        raise RuntimeError("tms serve did not start")

    def kill_if_running(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
            assert self.proc.stdout is not None
            self.proc.stdout.close()

    def stop(self, sig: int) -> int:
        assert self.proc is not None and self.proc.stdout is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(30)
        self.proc.stdout.close()
        return code


def load(url: str, acked: dict[str, int], stop: threading.Event, worker: str) -> None:
    client = MessagingClient(url, retries=0)
    rng = random.Random(worker)
    i = 0
    try:
        while not stop.is_set():
            i += 1
            name = f"{worker}-{i}"
            count = rng.randint(1, 50)
            client.publish(T, [f"{name}/{j}/{count}" for j in range(count)])
            acked[name] = count
    except TmsError:
        pass  # the server died
    finally:
        client.close()


@pytest.mark.parametrize("rpc", [False, True], ids=["http", "binary"])
def test_kill_9_under_load_and_sigterm(tmp_path: Path, rpc: bool) -> None:
    serve = Serve(tmp_path / "data", rpc=rpc)
    try:
        _rounds(serve)
    finally:
        serve.kill_if_running()


def _rounds(serve: Serve) -> None:
    acked: dict[str, int] = {}
    rng = random.Random(3)
    for round_ in range(3):
        url = serve.start()
        client = MessagingClient(url)
        with contextlib.suppress(TopicAlreadyExistsError):
            client.create_topic(T)
        found: dict[str, list[int]] = {}
        for message in client.poll(T).messages:
            name, index, count = message.payload.decode().split("/")
            found.setdefault(name, []).append(int(index))
            assert int(count) > 0
        client.close()
        assert not [a for a in acked if a not in found], "acknowledged messages lost"
        for name, indexes in found.items():
            assert indexes == sorted(indexes) and len(indexes) == len(set(indexes))
            assert indexes == list(range(len(indexes))) and (
                name not in acked or len(indexes) == acked[name]
            )
        stop = threading.Event()
        workers = [
            threading.Thread(target=load, args=(url, acked, stop, f"r{round_}w{n}"))
            for n in range(4)
        ]
        for w in workers:
            w.start()
        time.sleep(rng.uniform(0.5, 1.0))
        serve.stop(signal.SIGKILL)
        stop.set()
        for w in workers:
            w.join(10)
    assert acked, "the load made no progress"
    serve.start()
    assert serve.stop(signal.SIGTERM) == 0
