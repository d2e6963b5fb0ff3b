"""The ``tms`` command line.

::

    tms serve [--host H] [--port P] [--data-dir D] [--tx-server H:P] [--auth FILE]
              [--tls-cert PEM [--tls-key PEM]] [--config FILE.toml]
              [--tx-tls-ca PEM [--tx-tls-cert PEM --tx-tls-key PEM]]
              [--store postgresql://... [--zookeeper H:P,... [--zk-path /P] [--name ID]
               [--session-timeout-s S] [--advertise URL]]]
    tms topics create NS TOPIC [--ttl S] [--property K=V ...]
    tms topics list NS | get NS TOPIC | delete NS TOPIC
    tms topics update NS TOPIC [--ttl S] [--property K=V ...]
    tms publish NS TOPIC [MESSAGE ...]          (no messages: one per line of stdin)
    tms tail NS TOPIC [--from-start | --from-time MS | --from-id HEX] [--tx-server H:P]
                      [--tx-tls-ca PEM [--tx-tls-cert PEM --tx-tls-key PEM]]
    tms inspect NS TOPIC [--start-ms MS] [--end-ms MS] [--limit N] [--json]
    tms cluster status | up [--tms N] [--txn N]

Client commands talk to ``--url`` (default ``$TMS_URL`` or http://127.0.0.1:15166; a
cluster's instances separated by commas, the client fails over between them) with
``--token`` (default ``$TMS_TOKEN``); an https service's certificate is verified against
``--ca-bundle`` (default ``$TMS_CA_BUNDLE``, else the system's trust store). Exit codes:
0 success, 1 failure (one line on stderr, never a traceback), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import logging
import os
import signal
import sys
import time
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

from tms.errors import TmsError, TmsInvalidArgumentError, TransactionServiceError
from tms.model import TopicId
from txn.errors import TxError
from txn.rpc.tls import add_client_tls_arguments, client_tls

__all__ = ["main"]

DEFAULT_URL = "http://127.0.0.1:15166"
log = logging.getLogger("tms")
T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tms", description="txms messaging")
    p.add_argument("--version", action="version", version=f"tms {version('txms')}")
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--url",
        default=os.environ.get("TMS_URL", DEFAULT_URL),
        help="service URL (a cluster: several, separated by commas)",
    )
    p.add_argument("--token", default=os.environ.get("TMS_TOKEN"), help="bearer token")
    p.add_argument(
        "--ca-bundle",
        default=os.environ.get("TMS_CA_BUNDLE"),
        help="PEM file of the CA(s) that signed an https service's certificate",
    )
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the messaging service")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--data-dir", type=Path, default=Path("data/tms"))
    serve.add_argument(
        "--tx-server",
        help="HOST:PORT of the transaction server: transactional writes are checked against "
        "it (only write pointers it holds in progress), and cleanup reads its invalid list "
        "and reports what it has cleaned to its pruning",
    )
    serve.add_argument("--auth", type=Path, help="TOML file of tokens and grants")
    serve.add_argument("--tls-cert", help="PEM certificate (chain): serve HTTPS only")
    serve.add_argument("--tls-key", help="PEM private key, if not in the certificate file")
    serve.add_argument("--config", type=Path, help="TOML file: [tms] and [http] tables")
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
    serve.add_argument("--zk-path", default="/txms/tms", help="the cluster's ZooKeeper path")
    serve.add_argument("--name", help="this instance's id in the cluster (default host-pid)")
    serve.add_argument("--session-timeout-s", type=float, default=10.0)
    serve.add_argument("--advertise", help="the URL other instances send clients to")
    add_client_tls_arguments(serve, "--tx-tls-")

    topics = sub.add_parser("topics", help="manage topics").add_subparsers(
        dest="action", required=True
    )
    for name in ("create", "update"):
        cmd = topics.add_parser(name)
        cmd.add_argument("namespace")
        cmd.add_argument("topic")
        cmd.add_argument("--ttl", type=int, help="seconds")
        cmd.add_argument("--property", action="append", default=[], metavar="K=V")
    listing = topics.add_parser("list")
    listing.add_argument("namespace")
    for name in ("get", "delete"):
        cmd = topics.add_parser(name)
        cmd.add_argument("namespace")
        cmd.add_argument("topic")

    publish = sub.add_parser("publish", help="publish messages (arguments or stdin lines)")
    publish.add_argument("namespace")
    publish.add_argument("topic")
    publish.add_argument("messages", nargs="*")
    publish.add_argument("--batch", type=int, default=500, help="messages per request from stdin")

    tail = sub.add_parser("tail", help="follow a topic")
    tail.add_argument("namespace")
    tail.add_argument("topic")
    where = tail.add_mutually_exclusive_group()
    where.add_argument("--from-start", action="store_true")
    where.add_argument("--from-time", type=int, metavar="MS")
    where.add_argument("--from-id", metavar="HEX")
    tail.add_argument("--tx-server", help="read transactionally through this transaction server")
    add_client_tls_arguments(tail, "--tx-tls-")
    tail.add_argument("--format", choices=["text", "json"], default="text")
    tail.add_argument("--count", type=int, help="stop after this many messages")

    inspect = sub.add_parser("inspect", help="raw rows of a topic (consumes nothing)")
    inspect.add_argument("namespace")
    inspect.add_argument("topic")
    inspect.add_argument("--start-ms", type=int, default=0)
    inspect.add_argument("--end-ms", type=int)
    inspect.add_argument("--limit", type=int, default=1000)
    inspect.add_argument("--json", action="store_true")

    cluster = sub.add_parser("cluster", help="a cluster's instances").add_subparsers(
        dest="action", required=True
    )
    cluster.add_parser("status", help="live instances and topic owners (GET /v1/cluster)")
    up = cluster.add_parser("up", help="start a whole cluster on this machine, to try")
    up.add_argument("--tms", type=int, default=3, help="messaging instances")
    up.add_argument("--txn", type=int, default=2, help="transaction servers")
    return p


# -- serve ----------------------------------------------------------------------------------


def _config_tables(path: Path | None) -> tuple[dict[str, Any], dict[str, Any]]:
    if path is None:
        return {}, {}
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TmsInvalidArgumentError(f"cannot read {path}: {exc}") from exc
    unknown = set(data) - {"tms", "http"}
    if unknown:
        raise TmsInvalidArgumentError(f"{path}: unknown sections {sorted(unknown)}")
    return dict(data.get("tms", {})), dict(data.get("http", {}))


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


def _serve(args: argparse.Namespace) -> int:
    from tms.cleanup import Cleaner, CleanupLoop  # noqa: PLC0415 - server-only imports
    from tms.cluster.setup import StoreConfig, open_store  # noqa: PLC0415
    from tms.config import TmsConfig  # noqa: PLC0415
    from tms.guard import TransactionStateGuard  # noqa: PLC0415
    from tms.http.app import HttpConfig  # noqa: PLC0415
    from tms.http.auth import Authorizer  # noqa: PLC0415
    from tms.http.server import HttpServer, server_ssl_context  # noqa: PLC0415
    from tms.service import MessagingService  # noqa: PLC0415
    from txms_common.loop import new_event_loop  # noqa: PLC0415
    from txms_common.retry import RetryNTimes  # noqa: PLC0415
    from txn.rlimit import raise_open_file_limit  # noqa: PLC0415
    from txn.rpc.client import ThriftTxClient  # noqa: PLC0415

    tms_values, http_values = _config_tables(args.config)
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
    opened = open_store(stores)
    cluster = opened.cluster
    service = MessagingService(
        opened.store, tms_config, guard=guard, ownership=cluster, feed=opened.feed
    )
    cleanup = None
    if tms_config.cleanup_interval_s > 0:
        participant = tms_config.prune_participant if tx_client is not None else ""
        cleaner = Cleaner(service, tx_client, participant=participant or None)
        cleanup = CleanupLoop(cleaner, tms_config.cleanup_interval_s)

    async def run() -> None:
        server = HttpServer(service, http_config, authorizer)
        try:
            await server.start()
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise TmsInvalidArgumentError(
                f"cannot listen on {http_config.host}:{http_config.port}: {reason}"
            ) from exc
        stop = _stop_on_signal()  # before the address is out: a caller may signal at once
        if cluster is not None:
            cluster.start(args.advertise or server.url)
        if cleanup is not None:
            cleanup.start()
        print(
            f"tms: messaging service listening on {server.url} (data: {stores.where})", flush=True
        )
        await stop.wait()
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


# -- client commands --------------------------------------------------------------------------


def _properties(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep:
            raise TmsInvalidArgumentError(f"--property wants K=V, got {item!r}")
        props[key] = value
    if args.ttl is not None:
        props["ttl"] = str(args.ttl)
    return props


def _topics(client: Any, args: argparse.Namespace) -> int:
    if args.action == "list":
        for name in client.list_topics(args.namespace):
            print(name)
        return 0
    topic = TopicId(args.namespace, args.topic)
    if args.action == "create":
        client.create_topic(topic, _properties(args))
    elif args.action == "update":
        client.update_topic(topic, _properties(args))
    elif args.action == "get":
        print(json.dumps(client.get_topic(topic), indent=2, sort_keys=True))
    elif args.action == "delete":
        client.delete_topic(topic)
    return 0


def _stdin_batches(batch: int) -> Iterator[list[bytes]]:
    current: list[bytes] = []
    for line in sys.stdin.buffer:
        current.append(line.rstrip(b"\r\n"))
        if len(current) >= batch:
            yield current
            current = []
    if current:
        yield current


def _publish(client: Any, args: argparse.Namespace) -> int:
    from tqdm import tqdm  # noqa: PLC0415 - only for this command

    topic = TopicId(args.namespace, args.topic)
    if args.messages:
        client.publish(topic, args.messages)
        return 0
    with tqdm(unit="msg", desc=str(topic), disable=not sys.stderr.isatty()) as progress:
        for batch in _stdin_batches(max(1, args.batch)):
            client.publish(topic, batch)
            progress.update(len(batch))
    return 0


def _tail(client: Any, args: argparse.Namespace) -> int:
    topic = TopicId(args.namespace, args.topic)
    start: bytes | str | int | None = None
    if args.from_time is not None:
        start = args.from_time
    elif args.from_id is not None:
        start = args.from_id
    elif not args.from_start:
        start = int(time.time() * 1000)  # from now on
    client.get_topic(topic)  # an unreachable service or unknown topic: fail now, not follow
    tx_client = None
    if args.tx_server:
        from txms_common.retry import RetryWithBackoff  # noqa: PLC0415
        from txn.rpc.client import ThriftTxClient  # noqa: PLC0415

        # A few seconds of retrying (0.1 + 0.4 + 1.6 s), not the library's half minute.
        tls = client_tls(args.tx_tls_ca, args.tx_tls_cert, args.tx_tls_key)
        tx_client = ThriftTxClient(
            args.tx_server, tls=tls, timeout_s=5.0, retry=RetryWithBackoff(limit_s=2.0)
        )
    seen = 0
    try:
        for message in client.follow(topic, start=start, tx_client=tx_client):
            if args.format == "json":
                record = {
                    "id": message.id_hex,
                    "publishTime": message.publish_ms,
                    "payload": base64.b64encode(message.payload).decode(),
                }
                print(json.dumps(record), flush=True)
            else:
                print(f"{message.id_hex} {message.payload.decode('utf-8', 'replace')}", flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                break
    except KeyboardInterrupt:
        pass
    except TxError as exc:
        raise TransactionServiceError(
            f"cannot use the transaction server at {args.tx_server}: {exc}"
        ) from exc
    finally:
        if tx_client is not None:
            tx_client.close()
    return 0


def _inspect(client: Any, args: argparse.Namespace) -> int:
    topic = TopicId(args.namespace, args.topic)
    report = client.inspect(topic, start_ms=args.start_ms, end_ms=args.end_ms, limit=args.limit)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    state = "deleted" if report["deleted"] else "live"
    print(f"topic {args.namespace}:{args.topic}  generation {abs(report['generation'])} ({state})")
    columns = ("table", "gen", "time/ms", "seq", "kind", "tx write pointer", "bytes", "notes")
    print(_row_line(columns))
    for row in report["rows"]:
        notes = []
        if row.get("rolled_back"):
            notes.append("ROLLED BACK")
        if row.get("ttl_s") is not None:
            notes.append(f"ttl {row['ttl_s']}s")
        sealed = "seal" in row
        if sealed:
            notes.append(f"seal of marker {row['seal']['publish_ms']}/{row['seal']['seq']}")
        print(
            _row_line(
                (
                    row["table"],
                    row["generation"],
                    "-" if sealed else row.get("publish_ms", row.get("write_ms")),
                    row.get("seq", "-"),
                    "seal" if sealed else row.get("kind", "payload"),
                    row.get("tx_write_pointer") or "-",
                    row.get("payload_bytes") or "-",
                    " ".join(notes),
                )
            )
        )
    if report["truncated"]:
        print(f"... (more rows; raise --limit above {args.limit})")
    return 0


def _row_line(cells: tuple[object, ...]) -> str:
    widths = (8, 4, 14, 6, 13, 20, 8)
    text = " ".join(
        f"{cell!s:<{w}}" if i in (0, 4) else f"{cell!s:>{w}}"
        for i, (cell, w) in enumerate(zip(cells, widths, strict=False))
    )
    return f"{text}  {cells[-1]}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "cluster" and args.action == "up":
            from tms.cluster.up import run_cluster  # noqa: PLC0415

            return run_cluster(tms=args.tms, txn=args.txn)
        from tms.client import MessagingClient  # noqa: PLC0415

        with MessagingClient(args.url, token=args.token, ca_bundle=args.ca_bundle) as client:
            if args.command == "topics":
                return _topics(client, args)
            if args.command == "publish":
                return _publish(client, args)
            if args.command == "tail":
                return _tail(client, args)
            if args.command == "cluster":
                return _cluster_status(client)
            return _inspect(client, args)
    except (TmsError, TxError, OSError, ValueError) as exc:
        print(f"tms: {_one_line(exc)}", file=sys.stderr)
        return 1


def _cluster_status(client: Any) -> int:
    status = client.cluster()
    if status.get("mode") != "cluster":
        print("standalone: one instance, no cluster")
        return 0
    me = status["self"]
    print(f"answered by {me['id']} ({me['url']})")
    print(f"live instances: {len(status['instances'])}")
    for instance in status["instances"]:
        print(f"  {instance['id']}  {instance['url']}")
    print(f"owned topics: {len(status['owners'])}")
    for topic, owner in status["owners"].items():
        print(f"  {topic}  {owner}")
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
