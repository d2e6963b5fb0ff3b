"""The standalone stack (``make run``): the transaction server and the messaging service
in one process, on one event loop, with their state under one directory.

* transaction manager: ``<data>/txn`` (Tephra's layout), Thrift on ``--tx-port``;
* messaging service: LevelDB in ``<data>/tms``, REST on ``--http-port``;
* cleanup runs in the background against the in-process manager and truncates cleaned
  invalid transactions (the invalid list stays short);
* Ctrl-C or SIGTERM stops both cleanly (in-flight calls finish, final snapshot).

    python -m tms.standalone [--data-dir ./data] [--host 127.0.0.1]
                             [--tx-port 15165] [--http-port 15166]

``Launched`` runs it in a child process on free ports (for examples and benchmarks).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from tms.cleanup import Cleaner, CleanupLoop
from tms.config import TmsConfig
from tms.http.app import HttpConfig
from tms.http.server import HttpServer
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from txn.config import DEFAULT_PORT, ServerConfig, TxConfig
from txn.inmemory import InProcessTxClient
from txn.manager import TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.server import ThriftServer, new_event_loop

__all__ = ["Launched", "main"]


def _example(http: tuple[str, int], tx: tuple[str, int]) -> str:
    url = f"http://{http[0]}:{http[1]}"
    return f"""
txms is running.
  transaction server (Tephra Thrift protocol): {tx[0]}:{tx[1]}
  messaging service (REST, OpenAPI at {url}/v1/openapi.json): {url}

Try it from another shell:
  export TMS_URL={url}
  .venv/bin/tms topics create demo events
  .venv/bin/tms publish demo events hello world
  .venv/bin/tms tail demo events --from-start --count 2
  .venv/bin/tms inspect demo events
  .venv/bin/txn status --server {tx[0]}:{tx[1]}

Ctrl-C stops both.
""".rstrip()


async def _run(args: argparse.Namespace) -> None:
    data = Path(args.data_dir)
    manager = TransactionManager(TxConfig(), TransactionStateStore(LocalDirStorage(data / "txn")))
    manager.start()
    service = MessagingService(LevelDBStore(data / "tms"), TmsConfig(truncate_invalid=True))
    cleanup = CleanupLoop(
        Cleaner(service, InProcessTxClient(manager)), service.config.cleanup_interval_s
    )
    tx_server = ThriftServer(manager, ServerConfig(host=args.host, port=args.tx_port))
    http_server = HttpServer(service, HttpConfig(host=args.host, port=args.http_port))
    try:
        tx_address = await tx_server.start()
        http_address = await http_server.start()
        cleanup.start()
        stop = asyncio.Event()  # handlers before the addresses are out: callers signal at once
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(_example(http_address, tx_address), flush=True)
        await stop.wait()
        print("stopping...", flush=True)
    finally:
        await http_server.stop()
        await tx_server.close()
        cleanup.stop()
        service.close()
        manager.stop()
    print("stopped.", flush=True)


_TX_LINE = re.compile(r"transaction server \(Tephra Thrift protocol\): ([\d.]+):(\d+)")
_HTTP_LINE = re.compile(r"messaging service .*: (http://[\d.]+:\d+)$")


class Launched:
    """The standalone stack in a child process on free loopback ports, state under
    ``data_dir``: ``url`` of the messaging service, ``tx_address`` (``HOST:PORT``) of the
    transaction server. Its output is read all along (a full pipe would stall it); the
    last lines are in ``lines``. ``stop()`` (or leaving the ``with`` block) stops it
    cleanly."""

    def __init__(self, data_dir: str | os.PathLike[str], *, timeout_s: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tms.standalone",
                "--data-dir",
                os.fspath(data_dir),
                "--tx-port",
                "0",
                "--http-port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        self.url = self.tx_address = ""
        deadline = time.monotonic() + timeout_s
        while not (self.url and self.tx_address) and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if m := _TX_LINE.search(line):
                self.tx_address = f"{m.group(1)}:{m.group(2)}"
            if m := _HTTP_LINE.search(line.rstrip()):
                self.url = m.group(1)
        self.lines: deque[str] = deque(maxlen=50)
        self._drain = threading.Thread(target=self._read, name="standalone-output", daemon=True)
        self._drain.start()
        if not (self.url and self.tx_address):
            self.stop()
            raise RuntimeError("the standalone stack did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self.proc.stdout:
                self.lines.append(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        self._drain.join(10)  # to the end of its output, before the pipe closes
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> Launched:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tms.standalone", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tx-port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--http-port", type=int, default=HttpConfig().port)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(_run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
