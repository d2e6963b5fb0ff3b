"""``tms serve``: the messaging service, until SIGTERM or Ctrl-C.

::

    tms serve [--host H] [--port P] [--rpc-port P] [--data-dir D] [--tx-server H:P] [--auth FILE]
              [--tls-cert PEM [--tls-key PEM]] [--config FILE.toml]
              [--tx-tls-ca PEM [--tx-tls-cert PEM --tx-tls-key PEM]]
              [--store postgresql://... [--zookeeper H:P,... [--zk-path /P] [--name ID]
               [--session-timeout-s S] [--advertise URL]]]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import tomllib
import urllib.parse
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tms.errors import TmsInvalidArgumentError
from txn.rpc.tls import add_client_tls_arguments, client_tls

if TYPE_CHECKING:
    from tms.rpc.server import RpcServer

__all__ = ["register"]

log = logging.getLogger("tms")
T = TypeVar("T")


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the messaging service",
        description="Run the messaging service (REST API, console at /ui) until SIGTERM or Ctrl-C.",
    )
    serve.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 15166; 0: any free)")
    serve.add_argument(
        "--rpc-port",
        type=int,
        default=None,
        help="also serve the binary protocol on this port (docs/rpc.md; 0: any free)",
    )
    serve.add_argument(
        "--data-dir", type=Path, default=Path("data/tms"), help="LevelDB directory (data/tms)"
    )
    serve.add_argument(
        "--tx-server",
        help="HOST:PORT of the transaction server: transactional writes are checked against "
        "it (only write pointers it holds in progress), cleanup reads its invalid list and "
        "reports what it has cleaned to its pruning, and the console shows its state",
    )
    serve.add_argument("--auth", type=Path, help="TOML file of tokens and grants")
    serve.add_argument("--tls-cert", help="PEM certificate (chain): serve HTTPS only")
    serve.add_argument("--tls-key", help="PEM private key, if not in the certificate file")
    serve.add_argument("--config", type=Path, help="TOML file: [tms], [http] and [rpc] tables")
    serve.add_argument(
        "--store",
        help="postgresql://... : keep the tables in PostgreSQL (several instances may share "
        "it, with --zookeeper); default: LevelDB in --data-dir",
    )
    serve.add_argument(
        "--zookeeper",
        help="H1:P1,H2:P2,... : run as one instance of a cluster (topic ownership and "
        "membership in ZooKeeper); needs a PostgreSQL --store",
    )
    serve.add_argument(
        "--zk-path", default="/txms/tms", help="the cluster's ZooKeeper path (/txms/tms)"
    )
    serve.add_argument("--name", help="this instance's id in the cluster (default host-pid)")
    serve.add_argument(
        "--session-timeout-s",
        type=float,
        default=10.0,
        help="ZooKeeper session: a dead instance's topics are free after it (default 10)",
    )
    serve.add_argument(
        "--advertise", help="the URL other instances send clients to (default: where it listens)"
    )
    add_client_tls_arguments(serve, "--tx-tls-")
    serve.set_defaults(handler=_serve, client=False)


# -- serve ----------------------------------------------------------------------------------


def _config_tables(path: Path | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    if path is None:
        return {}, {}, {}
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TmsInvalidArgumentError(f"cannot read {path}: {exc}") from exc
    unknown = set(data) - {"tms", "http", "rpc"}
    if unknown:
        raise TmsInvalidArgumentError(f"{path}: unknown sections {sorted(unknown)}")
    return dict(data.get("tms", {})), dict(data.get("http", {})), dict(data.get("rpc", {}))


def _config(cls: type[T], values: dict[str, Any], where: str) -> T:
    """``cls(**values)``, an unknown or mistyped key being a clear error."""
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - known)
    if unknown:
        raise TmsInvalidArgumentError(f"[{where}]: unknown keys {unknown}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise TmsInvalidArgumentError(f"[{where}]: {exc}") from exc


async def _listen(starting: Awaitable[object], host: str, port: int) -> None:
    try:
        await starting
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise TmsInvalidArgumentError(f"cannot listen on {host}:{port}: {reason}") from exc


def _advertised_rpc(advertise: str | None, rpc: RpcServer | None) -> str:
    """Where other instances send binary clients: the binary port on ``--advertise``'s
    host, else where it listens ("" without the binary protocol)."""
    if rpc is None:
        return ""
    if not advertise:
        return rpc.url
    host = urllib.parse.urlsplit(advertise).hostname or rpc.address[0]
    scheme = rpc.url.split("://", 1)[0]
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{rpc.address[1]}"


def _serve(args: argparse.Namespace) -> int:
    from tms.cleanup import Cleaner, CleanupLoop  # noqa: PLC0415 - server-only imports
    from tms.cluster.setup import StoreConfig, open_store  # noqa: PLC0415
    from tms.config import TmsConfig  # noqa: PLC0415
    from tms.guard import TransactionStateGuard  # noqa: PLC0415
    from tms.http.app import HttpConfig  # noqa: PLC0415
    from tms.http.auth import Authorizer  # noqa: PLC0415
    from tms.http.server import HttpServer, server_ssl_context  # noqa: PLC0415
    from tms.rpc.config import RpcConfig  # noqa: PLC0415
    from tms.rpc.server import RpcServer  # noqa: PLC0415
    from tms.service import MessagingService  # noqa: PLC0415
    from tms.txwatch import TxWatch  # noqa: PLC0415
    from txms_common.loop import new_event_loop  # noqa: PLC0415
    from txms_common.retry import RetryNTimes  # noqa: PLC0415
    from txn.rlimit import raise_open_file_limit  # noqa: PLC0415
    from txn.rpc.client import ThriftTxClient  # noqa: PLC0415

    tms_values, http_values, rpc_values = _config_tables(args.config)
    for key, value in (
        ("host", args.host),
        ("port", args.port),
        ("tls_cert_file", args.tls_cert),
        ("tls_key_file", args.tls_key),
    ):
        if value is not None:
            http_values[key] = value
    tms_config = _config(TmsConfig, tms_values, "tms")
    http_config = _config(HttpConfig, http_values, "http")
    serve_rpc = args.rpc_port is not None or bool(rpc_values)
    for key, value in (
        ("host", args.host),
        ("port", args.rpc_port),
        ("tls_cert_file", http_config.tls_cert_file),
        ("tls_key_file", http_config.tls_key_file),
    ):
        if value is not None:
            rpc_values[key] = value
    rpc_config = _config(RpcConfig, rpc_values, "rpc")
    server_ssl_context(http_config)  # a certificate that does not load: refuse before anything
    authorizer = Authorizer.from_file(args.auth) if args.auth else None
    log.info("%s", raise_open_file_limit().describe())
    tls = client_tls(args.tx_tls_ca, args.tx_tls_cert, args.tx_tls_key)
    tx_client = ThriftTxClient(args.tx_server, tls=tls) if args.tx_server else None
    guard = None
    if args.tx_server:
        # Its own client: a check must fail fast (503) when the server is down, not
        # retry with Tephra's backoff for half a minute.
        guard_client = ThriftTxClient(args.tx_server, tls=tls, timeout_s=5, retry=RetryNTimes(2))
        guard = TransactionStateGuard(guard_client, max_age_s=tms_config.tx_state_cache_s)
    stores = StoreConfig(
        args.data_dir, args.store, args.zookeeper, args.zk_path, args.name, args.session_timeout_s
    )
    opened = open_store(stores, tms_config.leveldb_options())
    cluster = opened.cluster
    service = MessagingService(
        opened.store,
        tms_config,
        guard=guard,
        ownership=cluster,
        feed=opened.feed,
        subscription_store=opened.subscriptions,
    )
    cleanup = None
    if tms_config.cleanup_interval_s > 0:
        participant = tms_config.prune_participant if tx_client is not None else ""
        cleaner = Cleaner(service, tx_client, participant=participant or None)
        cleanup = CleanupLoop(cleaner, tms_config.cleanup_interval_s)

    watch = TxWatch(tx_client, where=args.tx_server) if tx_client is not None else None

    async def run() -> None:
        server = HttpServer(service, http_config, authorizer, watch)
        await _listen(server.start(), http_config.host, http_config.port)
        rpc = None
        if serve_rpc:
            rpc = RpcServer(
                service,
                rpc_config,
                authorizer,
                http_port=server.address[1],
                http_tls=http_config.tls_cert_file is not None,
            )
            try:
                await _listen(rpc.start(), rpc_config.host, rpc_config.port)
            except BaseException:
                await server.stop()
                raise
        stop = _stop_on_signal()  # before the address is out: a caller may signal at once
        if cluster is not None:
            cluster.start(args.advertise or server.url, _advertised_rpc(args.advertise, rpc))
        if cleanup is not None:
            cleanup.start()
        print(
            f"tms: messaging service listening on {server.url} (data: {stores.where})", flush=True
        )
        if rpc is not None:
            print(f"tms: binary protocol listening on {rpc.url}", flush=True)
        await stop.wait()
        if rpc is not None:
            await rpc.stop()
        await server.stop()

    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(run())
    finally:
        if cleanup is not None:
            cleanup.stop()
        if tx_client is not None:
            tx_client.close()
            guard_client.close()
        if cluster is not None:
            cluster.close()
        service.close()
    print("tms: stopped", flush=True)
    return 0


def _stop_on_signal() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (call on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
