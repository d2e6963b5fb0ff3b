"""The ``txn`` command line: the server, Tephra's ``TransactionAdmin`` operations, and an
offline inspector for state directories.

::

    txn serve [--host H] [--port P] [--data-dir D | --in-memory] [--config FILE.toml]
              [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--engine E]
    txn serve --zookeeper H:P,... --state postgresql://... [--zk-path /txms/txn]
              [--session-timeout-s S] [--advertise HOST] [--name NAME] [...]
    txn leader --zookeeper H:P,... [--zk-path /txms/txn]
    txn status | invalid-size | snapshot | reset-state | prune-now        [--server H:P]
    txn truncate-invalid-tx ID[,ID...]                                    [--server H:P]
    txn truncate-invalid-tx-before TIME                                   [--server H:P]
    txn inspect --data-dir D
    txn completion bash|zsh

Every admin command also takes ``--tls-ca PEM [--tls-cert PEM --tls-key PEM]`` for a
server behind TLS. ``--engine`` (or ``[txn] engine``) picks ``native``, ``python`` or
``auto``; ``auto`` follows the ``TXN_ENGINE`` environment variable, then native when built
(``txn.engine``). Output, times, progress and errors follow ``txn.clikit`` (``status``,
``snapshot`` and ``inspect`` take ``--output table|json`` and ``--utc``; the mutating
commands say what they did). Exit codes: 0 success, 1 the operation failed (one line on
stderr), 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import os
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

from txms_common.loop import new_event_loop
from txms_common.retry import RetryNTimes
from txn import engine
from txn.clikit import (
    Column,
    add_completion_command,
    add_output_options,
    add_version_option,
    emit,
    emit_object,
    format_time,
    guarded,
    parse_time,
    said,
)
from txn.config import DEFAULT_PORT, ServerConfig, TxConfig
from txn.errors import InvalidArgumentError, TxError
from txn.ha.zk import DEFAULT_BASE, ZkTarget
from txn.inmemory import manager_pruner
from txn.manager import ManagerState, TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.snapshot_codec import decode_snapshot
from txn.persist.store import TransactionStateStore
from txn.prune import PruningService, TransactionPruner
from txn.rlimit import raise_open_file_limit
from txn.rpc.client import ThriftTxClient, default_client_id
from txn.rpc.handler import TephraHandler
from txn.rpc.server import ThriftServer, new_server
from txn.rpc.tls import add_client_tls_arguments, client_tls
from txn.state import TransactionSnapshot
from txn.transaction import MAX_TX_PER_MS

__all__ = ["main"]

log = logging.getLogger("txn")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="txn",
        description="Tephra-compatible transaction manager: the server and its admin commands",
        epilog="Each command has its own --help. Docs: docs/txn.md.",
    )
    add_version_option(p, "txn")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the transaction server")
    serve.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=None, help=f"port (default {DEFAULT_PORT}; 0 = any)"
    )
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--data-dir", type=Path, help="state directory (snapshots and logs)")
    where.add_argument("--in-memory", action="store_true", help="keep no state on disk")
    serve.add_argument("--config", type=Path, help="TOML file: [txn] and [server] tables")
    serve.add_argument(
        "--engine", choices=engine.ENGINE_NAMES, help="native, python or auto ([txn] engine)"
    )
    ha = serve.add_argument_group("highly available mode (docs/operations.md)")
    ha.add_argument("--zookeeper", help="ensemble H:P,H:P,...: serve only while elected")
    ha.add_argument("--state", help="postgresql://... URL of the shared state (with --zookeeper)")
    ha.add_argument("--zk-path", default=DEFAULT_BASE, help=f"base znode (default {DEFAULT_BASE})")
    ha.add_argument(
        "--session-timeout-s", type=float, default=10.0, help="ZooKeeper session (default 10)"
    )
    ha.add_argument("--advertise", help="host published for clients (default: the bind host)")
    ha.add_argument("--name", help="this server's name in the election (default pid@host)")
    serve.add_argument("--tls-cert", help="serve TLS with this certificate (PEM)")
    serve.add_argument("--tls-key", help="the certificate's private key (PEM)")
    serve.add_argument(
        "--tls-client-ca", help="require client certificates signed by this CA (PEM)"
    )

    def admin(name: str, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument(
            "--server",
            default=f"127.0.0.1:{DEFAULT_PORT}",
            help=f"HOST:PORT of the transaction server (default 127.0.0.1:{DEFAULT_PORT})",
        )
        add_client_tls_arguments(cmd, "--tls-")
        return cmd

    status = admin(
        "status",
        "OK or NOTOK, with the read and write pointers, transactions in progress and the "
        "invalid list (exit 1 unless OK)",
    )
    add_output_options(status)
    admin("invalid-size", "print the size of the invalid list")
    snap = admin("snapshot", "fetch and describe the server's state")
    snap.add_argument("--out", type=Path, help="write the raw snapshot (codec V4) here")
    add_output_options(snap)
    admin("reset-state", "forget every transaction (dangerous)")
    admin("prune-now", "run invalid-list pruning now")
    trunc = admin("truncate-invalid-tx", "remove ids from the invalid list")
    trunc.add_argument("ids", help="comma-separated transaction ids")
    before = admin("truncate-invalid-tx-before", "remove invalid ids started before a time")
    before.add_argument(
        "time_ms",
        type=parse_time,
        metavar="TIME",
        help="milliseconds since the epoch, or ISO-8601 (local unless it has an offset or Z)",
    )

    leader = sub.add_parser("leader", help="print the elected server's HOST:PORT")
    leader.add_argument("--zookeeper", required=True, help="ensemble H:P,H:P,...")
    leader.add_argument(
        "--zk-path", default=DEFAULT_BASE, help=f"base znode (default {DEFAULT_BASE})"
    )

    inspect = sub.add_parser("inspect", help="describe a state directory (offline)")
    inspect.add_argument("--data-dir", type=Path, required=True, help="the state directory")
    add_output_options(inspect)
    add_completion_command(sub, "txn", build_parser)
    return p


def _load_config(path: Path | None) -> tuple[dict[str, Any], dict[str, Any]]:
    if path is None:
        return {}, {}
    with path.open("rb") as f:
        data = tomllib.load(f)
    unknown = set(data) - {"txn", "server"}
    if unknown:
        raise TxError(f"{path}: unknown sections {sorted(unknown)} (expected [txn], [server])")
    return dict(data.get("txn", {})), dict(data.get("server", {}))


def _serve(args: argparse.Namespace) -> int:
    txn_values, server_values = _load_config(args.config)
    if args.host is not None:
        server_values["host"] = args.host
    if args.port is not None:
        server_values["port"] = args.port
    for key in ("tls_cert", "tls_key", "tls_client_ca"):
        if getattr(args, key) is not None:
            server_values[key] = getattr(args, key)
    if args.engine is not None:
        txn_values["engine"] = args.engine
    config = TxConfig.from_mapping(txn_values)
    try:
        server_config = ServerConfig(**server_values)
    except TypeError as exc:  # an unknown or missing key: the user's file, not a bug
        raise TxError(f"[server]: {exc}") from exc
    log.info("%s", raise_open_file_limit().describe())
    if args.zookeeper is not None or args.state is not None:
        return _serve_elected(args, config, server_config)
    data_dir = args.data_dir if not args.in_memory else None
    if data_dir is None and not args.in_memory:
        data_dir = Path("data/txn")
    store = TransactionStateStore(LocalDirStorage(data_dir)) if data_dir is not None else None
    manager = TransactionManager(config, store)
    manager.start()
    pruner = None
    pruning = None
    if config.prune_enable:
        pruner = manager_pruner(manager)
        pruning = PruningService(pruner, config.prune_interval_s)
        pruning.start()
        log.info(
            "invalid-list pruning every %s s; participants reporting over the wire: %s",
            config.prune_interval_s,
            ", ".join(config.prune_participants) or "none (nothing will be pruned)",
        )
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(_run_server(manager, server_config, pruner, store))
    finally:
        if pruning is not None:
            pruning.stop()
        manager.stop()


async def _run_server(
    manager: TransactionManager,
    config: ServerConfig,
    pruner: TransactionPruner | None,
    store: TransactionStateStore | None,
) -> int:
    server = new_server(manager, config, TephraHandler(manager, pruner))
    host, port = await server.start()
    where = store.location if store is not None else "memory only"
    if config.tls_client_ca is None and not ipaddress.ip_address(host).is_loopback:
        log.warning(
            "listening on %s without client authentication: anyone who can reach it can "
            "start, commit and invalidate transactions (set tls_cert, tls_key, tls_client_ca)",
            host,
        )
    stop = asyncio.Event()  # handlers before the address is out: a caller may signal at once
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    kind = "python" if isinstance(server, ThriftServer) else "native"
    serving = manager.engine.name + ("" if kind == manager.engine.name else f", {kind} server")
    print(
        f"txn: transaction server listening on {host}:{port} (state: {where}; engine: {serving})",
        flush=True,
    )
    code = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=0.5)
        except TimeoutError:
            if manager.state is ManagerState.FAILED:
                log.critical("the transaction manager failed; shutting down")
                code = 1
                break
    await server.close()
    print("txn: stopped", flush=True)
    return code


def _serve_elected(args: argparse.Namespace, config: TxConfig, server_config: ServerConfig) -> int:
    """``txn serve --zookeeper ... --state postgresql://...`` (``txn.ha.elected``)."""
    if args.zookeeper is None or args.state is None or not args.state.startswith("postgres"):
        raise InvalidArgumentError("--zookeeper and --state postgresql://... go together")
    if args.data_dir is not None or args.in_memory:
        raise InvalidArgumentError("--data-dir/--in-memory do not apply with --state")
    from txn.ha.elected import ElectedServer, HaConfig  # noqa: PLC0415 - kazoo only here

    ha = HaConfig(
        ZkTarget(args.zookeeper, args.zk_path),
        args.state,
        session_timeout_s=args.session_timeout_s,
        identifier=args.name or default_client_id(),
        advertise=args.advertise,
    )

    def serving(host: str, port: int, epoch: int) -> None:
        print(f"txn: leading (epoch {epoch}), listening on {host}:{port}", flush=True)

    elected = ElectedServer(ha, config, server_config, on_serving=serving)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: elected.stop())
    print(
        f"txn: standing by in {ha.zookeeper.url} (state: {args.state.split('@')[-1]})", flush=True
    )
    code = elected.run()
    print("txn: stopped", flush=True)
    return code


def _leader(args: argparse.Namespace) -> int:
    from txn.ha.zk import read_leader, session  # noqa: PLC0415 - kazoo only here

    target = ZkTarget(args.zookeeper, args.zk_path)
    client = session(target)
    try:
        address = read_leader(client, target)
    finally:
        client.stop()
        client.close()
    if address is None:
        print(f"txn: no leader in {target.url}", file=sys.stderr)
        return 1
    print(f"{address[0]}:{address[1]}")
    return 0


def _describe(snapshot: TransactionSnapshot) -> dict[str, Any]:
    return {
        "timestamp_ms": snapshot.timestamp_ms,
        "read_pointer": snapshot.read_pointer,
        "write_pointer": snapshot.write_pointer,
        "invalid": list(snapshot.invalid),
        "in_progress": {
            str(wp): {
                "type": e.type.name if e.type else None,
                "expiration_ms": e.expiration_ms,
                "visibility_upper_bound": e.visibility_upper_bound,
                "checkpoints": list(e.checkpoint_write_pointers),
            }
            for wp, e in snapshot.in_progress.items()
        },
        "committing": {str(k): len(v) for k, v in snapshot.committing.items()},
        "committed_sets": len(snapshot.committed),
    }


_IN_PROGRESS = (
    Column("TRANSACTION", "id"),
    Column("TYPE", "type"),
    Column("STARTED", "started", "time"),
    Column("EXPIRES", "expires", "time"),
    Column("CHECKPOINTS", "checkpoints", "int"),
)


def _show_snapshot(args: argparse.Namespace, described: dict[str, Any] | None) -> None:
    """A described snapshot (``_describe``): JSON, or a summary and its transactions."""
    if args.output == "json" or described is None:
        print(json.dumps(described, indent=2))
        return
    emit_object(
        args,
        {
            "taken": described["timestamp_ms"],
            "read pointer": described["read_pointer"],
            "write pointer": described["write_pointer"],
            "in progress": len(described["in_progress"]),
            "invalid": len(described["invalid"]),
            "committing": len(described["committing"]),
            "committed change sets": described["committed_sets"],
        },
        (Column("taken", "taken", "time"),),
    )
    rows = [
        {
            "id": wp,
            "type": entry["type"],
            "started": int(wp) // MAX_TX_PER_MS,
            # Long transactions never expire (Tephra stores -1 for them).
            "expires": entry["expiration_ms"] if entry["expiration_ms"] > 0 else None,
            "checkpoints": len(entry["checkpoints"]),
        }
        for wp, entry in described["in_progress"].items()
    ]
    if rows:
        print()
        emit(args, rows, _IN_PROGRESS)


def _inspect(args: argparse.Namespace) -> int:
    storage = LocalDirStorage(args.data_dir)
    store = TransactionStateStore(storage)
    snapshot = store.latest_snapshot()
    since = snapshot.timestamp_ms if snapshot else 0
    counts: dict[str, int] = {}
    for ts in storage.list_logs():
        if ts < since:
            continue
        with storage.read_log(ts) as buf:
            counts[f"txlog.{ts}"] = len(buf)
    report: dict[str, Any] = {
        "location": store.location,
        "snapshots": storage.list_snapshots(),
        "logs_to_replay": counts,
        "latest_snapshot": _describe(snapshot) if snapshot else None,
    }
    if args.output == "json":
        print(json.dumps(report, indent=2))
        return 0
    print(f"state directory {report['location']}")
    print(f"snapshots: {len(report['snapshots'])}, logs to replay: {len(counts)} "
          f"({sum(counts.values()):,} bytes)")  # fmt: skip
    if snapshot is None:
        print("no snapshot yet")
        return 0
    print()
    _show_snapshot(args, report["latest_snapshot"])
    return 0


def _status(args: argparse.Namespace, client: ThriftTxClient) -> int:
    """The server's status and, when OK, its state as a fresh transaction sees it
    (Tephra's calls only: a short transaction started and aborted)."""
    status = client.status()
    record: dict[str, Any] = {"status": status}
    if status == "OK":
        probe = client.start_short()
        client.abort(probe)
        others = [t for t in probe.in_progress if t != probe.transaction_id]
        record.update(
            {
                "readPointer": probe.read_pointer,
                "writePointer": probe.write_pointer,
                "inProgress": len(others),
                "oldestInProgress": min(others) // MAX_TX_PER_MS if others else None,
                "invalid": len(probe.invalids),
            }
        )
    emit_object(
        args,
        record,
        (
            Column("status", "status"),
            Column("read pointer", "readPointer"),
            Column("write pointer", "writePointer"),
            Column("in progress", "inProgress", "int"),
            Column("oldest in progress started", "oldestInProgress", "time"),
            Column("invalid", "invalid", "int"),
        ),
    )
    return 0 if status == "OK" else 1


def _admin(args: argparse.Namespace) -> int:
    tls = client_tls(args.tls_ca, args.tls_cert, args.tls_key)
    with ThriftTxClient(args.server, retry=RetryNTimes(2), timeout_s=30, tls=tls) as client:
        cmd = args.command
        if cmd == "status":
            return _status(args, client)
        if cmd == "invalid-size":
            print(f"Invalid list size: {client.invalid_size()}")
        elif cmd == "snapshot":
            data = client.get_snapshot()
            if args.out:
                args.out.write_bytes(data)
                said(f"wrote the snapshot ({len(data):,} bytes) to {args.out}", out=sys.stderr)
            _show_snapshot(args, _describe(decode_snapshot(data)))
        elif cmd == "reset-state":
            client.reset_state()
            said(f"reset the state of {args.server}: every transaction forgotten")
        elif cmd == "prune-now":
            before = client.invalid_size()
            client.prune_now()
            after = client.invalid_size()
            said(f"pruned the invalid list of {args.server}: {before:,} -> {after:,} ids")
        elif cmd == "truncate-invalid-tx":
            ids = [int(i) for i in args.ids.split(",") if i.strip()]
            before = client.invalid_size()
            if client.truncate_invalid_tx(ids):
                removed = before - client.invalid_size()
                said(f"removed {removed:,} of {len(ids):,} ids from the invalid list")
            else:
                said("unchanged: none of the ids is in the invalid list")
        elif cmd == "truncate-invalid-tx-before":
            when = format_time(args.time_ms)
            before = client.invalid_size()
            if client.truncate_invalid_tx_before(args.time_ms):
                removed = before - client.invalid_size()
                said(f"removed {removed:,} ids started before {when} from the invalid list")
            else:
                said(f"unchanged: no invalid id started before {when}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    def run() -> int:
        engine.set_default(os.environ.get("TXN_ENGINE", "auto"))
        if args.command == "serve":
            return _serve(args)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "leader":
            return _leader(args)
        if args.command == "completion":
            code: int = args.handler(args)
            return code
        return _admin(args)

    return guarded("txn", (TxError, OSError, ValueError), run)


if __name__ == "__main__":
    sys.exit(main())
