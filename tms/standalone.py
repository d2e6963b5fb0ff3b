"""The standalone stack (``make run``): the transaction server and the messaging service
in one process, on one event loop, with their state under one directory.

* transaction manager: ``<data>/txn`` (Tephra's layout), Thrift on ``--tx-port``;
* messaging service: LevelDB in ``<data>/tms``, REST on ``--http-port`` (HTTPS with
  ``--tls-cert``/``--tls-key``; bearer tokens and grants with ``--auth``) and the binary
  protocol (docs/rpc.md) on ``--rpc-port`` (TLS with the same certificate);
* transactional writes are checked against the in-process manager (``tms.guard``);
* cleanup runs in the background against the in-process manager; it is a pruning
  participant of the manager (``txn.prune``), whose pruning runs every
  ``prune_interval_s`` and truncates what every participant has cleaned (the invalid
  list stays short);
* ``--config`` takes a TOML file with the ``[txn]`` and ``[server]`` tables of
  ``txn serve`` and the ``[tms]``, ``[http]`` and ``[rpc]`` tables of ``tms serve`` (pruning is on
  unless ``[txn] prune_enable = false``); command-line options win over it;
* Ctrl-C or SIGTERM stops both cleanly (in-flight calls finish, final snapshot).

    python -m tms.standalone [--data-dir ./data] [--host 127.0.0.1]
                             [--tx-port 15165] [--http-port 15166] [--rpc-port 15167]
                             [--config FILE.toml]
                             [--auth auth.toml] [--tls-cert cert.pem [--tls-key key.pem]]

At start it raises its open-file limit to the hard limit and prints where it listens
and what to try. Whatever stops it from starting (the data directory in use by another
instance, a port taken, an unreadable config, auth file or certificate) is one line on
stderr and exit status 1.

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
import tomllib
from collections import deque
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from tms.cleanup import Cleaner, CleanupLoop
from tms.config import TmsConfig
from tms.errors import TmsError
from tms.guard import TransactionStateGuard
from tms.http.auth import Authorizer
from tms.http.config import HttpConfig
from tms.http.server import HttpServer, server_ssl_context
from tms.rpc.config import RpcConfig
from tms.rpc.server import RpcServer
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.txwatch import TxWatch
from txms_common.loop import new_event_loop
from txn import engine
from txn.config import DEFAULT_PORT, ServerConfig, TxConfig
from txn.errors import TxError
from txn.inmemory import InProcessTxClient, manager_pruner
from txn.manager import TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.store import TransactionStateStore
from txn.prune import PruningService
from txn.rlimit import raise_open_file_limit
from txn.rpc.handler import TephraHandler
from txn.rpc.server import new_server

__all__ = ["Launched", "main", "try_commands"]

C = TypeVar("C")


class StartError(Exception):
    """The stack cannot start; the message says why, in one line."""


def try_commands(url: str, tx: str, *, auth: bool = False, tls: bool = False) -> list[str]:
    """The commands the banner suggests (README.md shows those of the defaults)."""
    lines = [f"export TMS_URL={url}"]
    if auth:
        lines.append("export TMS_TOKEN=...          # a token of the auth file")
    if tls:
        lines.append("export TMS_CA_BUNDLE=ca.pem   # unless its CA is in the system's trust")
    return [
        *lines,
        ".venv/bin/tms topics create demo events",
        ".venv/bin/tms publish demo events hello world",
        f".venv/bin/tms tail demo events --from-start --count 2 --tx-server {tx}",
        ".venv/bin/tms inspect demo events",
        f".venv/bin/txn status --server {tx}",
    ]


def _banner(url: str, rpc: str, tx: str, args: argparse.Namespace, limits: str) -> str:
    commands = try_commands(url, tx, auth=args.auth is not None, tls=args.tls_cert is not None)
    lines = [
        "txms is running.",
        f"  transaction server (Tephra Thrift protocol): {tx}",
        f"  messaging service (REST, OpenAPI at {url}/v1/openapi.json): {url}",
        f"  messaging service (binary protocol): {rpc}",
        f"  operations console: {url}/ui/",
    ]
    if args.auth is not None:
        lines.append(f"  bearer tokens and grants: {args.auth}")
    lines.append(f"  {limits}")
    lines += ["", "Try it from another shell:", *(f"  {c}" for c in commands), ""]
    lines.append("Ctrl-C stops both.")
    return "\n".join(lines)


_TABLES = ("txn", "server", "tms", "http", "rpc")


def _config_tables(path: str | None) -> dict[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = {name: {} for name in _TABLES}
    if path is None:
        return tables
    with open(path, "rb") as f:
        data = tomllib.load(f)
    unknown = sorted(set(data) - set(_TABLES))
    if unknown:
        raise ValueError(f"{path}: unknown tables {unknown} (expected {list(_TABLES)})")
    for name in _TABLES:
        tables[name].update(data.get(name, {}))
    return tables


def _given(**options: object) -> dict[str, object]:
    """The command-line options that were given (they win over the config file)."""
    return {k: v for k, v in options.items() if v is not None}


def _make(cls: type[C], table: str, values: dict[str, Any]) -> C:
    """``cls(**values)``; an unknown or mistyped key of the user's file is a StartError."""
    try:
        return cls(**values)
    except TypeError as exc:
        raise StartError(f"[{table}]: {exc}") from exc


async def _run(args: argparse.Namespace) -> None:
    limits = raise_open_file_limit()
    data = Path(args.data_dir)
    tables = _config_tables(args.config)
    tx_config = TxConfig.from_mapping({"prune_enable": True, **tables["txn"]})
    server_config = _make(
        ServerConfig, "server", {**tables["server"], **_given(host=args.host, port=args.tx_port)}
    )
    given = _given(
        host=args.host, port=args.http_port, tls_cert_file=args.tls_cert, tls_key_file=args.tls_key
    )
    http_config = _make(HttpConfig, "http", {**tables["http"], **given})
    rpc_given = _given(
        host=args.host,
        port=args.rpc_port,
        tls_cert_file=http_config.tls_cert_file,
        tls_key_file=http_config.tls_key_file,
    )
    rpc_config = _make(RpcConfig, "rpc", {**tables["rpc"], **rpc_given})
    tms_config = _make(TmsConfig, "tms", tables["tms"])
    server_ssl_context(http_config)  # a certificate that does not load: refuse before anything
    authorizer = Authorizer.from_file(args.auth) if args.auth is not None else None
    manager = TransactionManager(tx_config, TransactionStateStore(LocalDirStorage(data / "txn")))
    manager.start()
    tx_client = InProcessTxClient(manager)
    guard = TransactionStateGuard(tx_client, max_age_s=tms_config.tx_state_cache_s)
    try:
        service = MessagingService(
            LevelDBStore(data / "tms", **tms_config.leveldb_options()), tms_config, guard=guard
        )
    except BaseException:
        manager.stop()
        raise
    cleaner = Cleaner(service, tx_client)
    cleanup = CleanupLoop(cleaner, service.config.cleanup_interval_s)
    # Cleanup never truncates: the manager's pruning does, below every participant's bound.
    pruner = manager_pruner(manager, [cleaner]) if tx_config.prune_enable else None
    pruning = None if pruner is None else PruningService(pruner, tx_config.prune_interval_s)
    tx_server = new_server(manager, server_config, TephraHandler(manager, pruner))
    watch = TxWatch(
        InProcessTxClient(manager),
        where="in process",
        last_prune=(lambda: pruner.last_run) if pruner is not None else None,
    )
    http_server = HttpServer(service, http_config, authorizer, watch)
    rpc_server = RpcServer(
        service, rpc_config, authorizer, http_tls=http_config.tls_cert_file is not None
    )
    try:
        tx_host, tx_port = await _listen("transaction server", tx_server.start(), server_config)
        await _listen("messaging service", http_server.start(), http_config)
        rpc_server.http_port = http_server.address[1]
        await _listen("binary protocol", rpc_server.start(), rpc_config)
        cleanup.start()
        if pruning is not None:
            pruning.start()
        stop = asyncio.Event()  # handlers before the addresses are out: callers signal at once
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        addresses = (http_server.url, rpc_server.url, f"{tx_host}:{tx_port}")
        print(_banner(*addresses, args, limits.describe()), flush=True)
        await stop.wait()
        print("stopping...", flush=True)
    finally:
        await rpc_server.stop()
        await http_server.stop()
        await tx_server.close()
        if pruning is not None:
            pruning.stop()
        cleanup.stop()
        service.close()
        manager.stop()
    print("stopped.", flush=True)


async def _listen(
    what: str,
    starting: Awaitable[tuple[str, int]],
    config: ServerConfig | HttpConfig | RpcConfig,
) -> tuple[str, int]:
    try:
        return await starting
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise StartError(f"{what}: cannot listen on {config.host}:{config.port}: {reason}") from exc


_TX_LINE = re.compile(r"transaction server \(Tephra Thrift protocol\): ([\d.]+):(\d+)")
_HTTP_LINE = re.compile(r"messaging service .*: (https?://[\d.]+:\d+)$")
_RPC_LINE = re.compile(r"messaging service \(binary protocol\): (tmss?://[\d.]+:\d+)$")


class Launched:
    """The standalone stack in a child process on free loopback ports, state under
    ``data_dir``: ``url`` of the messaging service, ``rpc_url`` of its binary protocol,
    ``tx_address`` (``HOST:PORT``) of the transaction server. Its output is read all
    along (a full pipe would stall it): the lines up to the addresses are in
    ``startup``, the last ones after them in ``lines``.
    ``stop()`` (or leaving the ``with`` block) stops it cleanly."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *extra: str,
        timeout_s: float = 60.0,
        module: str = "tms.standalone",
        env: dict[str, str] | None = None,
    ) -> None:
        """``extra``: more command-line arguments (e.g. ``--config FILE``); ``module``:
        what runs them (a benchmark's wrapper of ``tms.standalone``), with ``env`` added
        to the environment."""
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                "--data-dir",
                os.fspath(data_dir),
                "--tx-port",
                "0",
                "--http-port",
                "0",
                "--rpc-port",
                "0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        self.url = self.rpc_url = self.tx_address = ""
        self.startup: list[str] = []
        deadline = time.monotonic() + timeout_s
        while not (self.url and self.rpc_url and self.tx_address) and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.startup.append(line)
            if m := _TX_LINE.search(line):
                self.tx_address = f"{m.group(1)}:{m.group(2)}"
            if m := _HTTP_LINE.search(line.rstrip()):
                self.url = m.group(1)
            if m := _RPC_LINE.search(line.rstrip()):
                self.rpc_url = m.group(1)
        self.lines: deque[str] = deque(maxlen=50)
        self._drain = threading.Thread(target=self._read, name="standalone-output", daemon=True)
        self._drain.start()
        if not (self.url and self.rpc_url and self.tx_address):
            self.stop()
            said = "".join(self.startup).strip() or "nothing"
            raise RuntimeError(f"the standalone stack did not start; it said: {said}")

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
    parser.add_argument("--host", default=None, help="address of both servers (127.0.0.1)")
    parser.add_argument("--tx-port", type=int, default=None, help=f"default {DEFAULT_PORT}")
    parser.add_argument("--http-port", type=int, default=None, help=f"default {HttpConfig().port}")
    parser.add_argument("--rpc-port", type=int, default=None, help=f"default {RpcConfig().port}")
    parser.add_argument("--config", default=None, help="TOML: [txn] [server] [tms] [http] [rpc]")
    parser.add_argument("--auth", help="TOML file of bearer tokens and grants (docs/http.md)")
    parser.add_argument("--tls-cert", help="PEM certificate (chain): serve HTTPS")
    parser.add_argument("--tls-key", help="PEM private key, if not in the certificate file")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        engine.set_default(os.environ.get("TXN_ENGINE", "auto"))  # see txn.engine
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(_run(args))
    except (StartError, TmsError, TxError, OSError, ValueError) as exc:
        print(f"txms: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
