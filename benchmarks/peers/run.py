"""The command: start the peers, run every workload on every system, write the results.

    python -m benchmarks.peers [--quick] [--seconds S] [--systems txms,redis-always,...]
                               [--workloads publish,latency,...] [--out FILE]
                               [--plots DIR | --no-plots] [--markdown FILE]
                               [--latency-rates 1000,5000,10000] [--latency-seconds S]
    python -m benchmarks.peers --report FILE [--plots DIR] [--markdown FILE]

Systems: ``txms``, ``txms-rpc`` and ``txms-lean`` (one standalone stack), ``redis-always`` and
``redis-everysec`` (a ``redis-server`` each), ``postgres`` (a throwaway cluster),
``plyvel`` and ``http-echo`` (the limits). Every server is started here on loopback in
a temporary directory (``$BENCH_DIR`` if set) and stopped at the end, whatever happens.
A system that cannot be started is an error, never skipped: leave it out with
``--systems``.

Results: ``benchmarks/results/peers.json`` (``peers-quick.json`` with ``--quick``), the
comparison tables on stdout (and in ``--markdown``), PNG plots in ``docs/img``
(``benchmarks/results/peers-quick-*.png`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.common import new_report
from benchmarks.peers.base import System, Workload
from benchmarks.peers.machine import OtherCpu
from benchmarks.peers.report import Record, Results, markdown, plot, read_results, write_results
from benchmarks.peers.workloads import Settings, plan, settings_for

__all__ = ["ALL_SYSTEMS", "main", "open_systems", "run"]

RESULTS = Path(__file__).resolve().parent.parent / "results"
PLOTS = Path(__file__).resolve().parents[2] / "docs" / "img"
ALL_SYSTEMS = (
    "txms",
    "txms-rpc",
    "txms-lean",
    "redis-always",
    "redis-everysec",
    "postgres",
    "plyvel",
    "http-echo",
)


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in ("plyvel", "redis", "hiredis", "psycopg", "psycopg-binary", "aiohttp", "uvloop"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def open_systems(
    names: list[str], root: Path, stack: contextlib.ExitStack, other: OtherCpu | None = None
) -> list[System]:
    """Start the servers the named systems need and build the systems, in ``names``'
    order; everything is stopped or closed when ``stack`` unwinds. Servers outside this
    process's session are registered with ``other``."""
    unknown = set(names) - set(ALL_SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems: {', '.join(sorted(unknown))}")
    systems: list[System] = []
    txms_stack: Any = None
    for name in names:
        system: System
        if name in ("txms", "txms-rpc", "txms-lean"):
            from benchmarks.peers.txms import TxmsLean, TxmsRpc, TxmsSystem
            from tms.standalone import Launched

            if txms_stack is None:
                txms_stack = Launched(root / "txms")
                stack.callback(txms_stack.stop)
            if name == "txms":
                system = TxmsSystem(txms_stack.url, txms_stack.tx_address)
            elif name == "txms-rpc":
                system = TxmsRpc(txms_stack.rpc_url, txms_stack.tx_address)
            else:
                system = TxmsLean(txms_stack.url)
        elif name.startswith("redis-"):
            from benchmarks.peers.redis_streams import RedisStreams
            from benchmarks.peers.servers import RedisServer

            server = RedisServer(root, name.removeprefix("redis-"))
            server.start()
            stack.callback(server.stop)
            system = RedisStreams(server.port, server.appendfsync)
        elif name == "postgres":
            from benchmarks.peers.postgres import PostgresOutbox
            from benchmarks.peers.servers import PostgresServer

            pg = PostgresServer(root)
            pg.start()
            stack.callback(pg.stop)
            if other is not None:
                other.own(pg.pid)
            system = PostgresOutbox(pg.dsn)
        elif name == "plyvel":
            from benchmarks.peers.limits import PlyvelLimit

            system = PlyvelLimit(root)
        else:
            from benchmarks.peers.limits import EchoServer, HttpEchoLimit

            echo = EchoServer()
            stack.callback(echo.stop)
            system = HttpEchoLimit(echo.start())
        stack.callback(system.close)
        systems.append(system)
    return systems


def _describe(systems: list[System]) -> dict[str, dict[str, Any]]:
    described = {}
    for s in systems:
        entry: dict[str, Any] = {
            "kind": s.kind.value,
            "description": s.description,
            "durable": s.durable,
            "workloads": sorted(w.value for w in s.workloads),
        }
        version: Callable[[], str] | None = getattr(s, "version", None)
        if version is not None:
            entry["version"] = version()
        described[s.name] = entry
    return described


def run(
    settings: Settings,
    names: list[str],
    root: Path,
    *,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> Results:
    """Measure ``names`` under ``settings`` with servers under ``root``; the results."""
    from tqdm import tqdm

    head = new_report("peers")  # when it started, on what machine
    started = time.time()
    records: list[Record] = []
    errors: list[dict[str, str]] = []
    other = OtherCpu()
    others: list[float] = []
    with contextlib.ExitStack() as stack:
        systems = open_systems(names, root, stack, other)
        tasks = plan(settings, systems)
        tqdm.monitor_interval = 0  # no monitor thread: workers are forked
        say = echo
        with tqdm(total=len(tasks), desc="peers", unit="step", disable=not progress) as bar:
            if progress:
                say = bar.write
            for task in tasks:
                bar.set_postfix_str(task.label, refresh=True)
                other.start()
                try:
                    measured = task.run()
                except Exception as exc:
                    # one broken point must not cost the rest of the run; it is reported
                    errors.append({"task": task.label, "error": traceback.format_exc()})
                    say(f"{task.label}: FAILED: {exc!r}")
                    measured = []
                # the machine is shared: what others ran meanwhile goes with each figure
                others.append(other.cpus())
                for record in measured:
                    record.extra["other_cpus"] = others[-1]
                    records.append(record)
                    say(f"{task.label}: {record.value:,.1f} {record.unit}")
                bar.update()
        described = _describe(systems)
    meta = {
        **head,
        "wall_s": round(time.time() - started, 1),
        "other_cpus": {
            "mean": round(sum(others) / max(1, len(others)), 2),
            "max": max(others, default=0.0),
        },
        "settings": {
            k: sorted(v) if isinstance(v, frozenset) else v for k, v in vars(settings).items()
        },
        "packages": _package_versions(),
        "errors": errors,
    }
    return Results(meta, described, records)


def _finish(results: Results, args: argparse.Namespace) -> None:
    table = markdown(results)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    if args.no_plots:
        return
    quick = bool(results.meta.get("quick"))
    # smoke runs' plots stay beside their results, out of the docs
    where = args.plots or (RESULTS if quick else PLOTS)
    try:
        written = plot(results, where, "peers-quick" if quick else "peers")
    except ImportError:
        print("no plots: matplotlib is not installed (pip install -e '.[bench]')")
        return
    for path in written:
        print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="the smoke run: under 2 minutes")
    parser.add_argument("--seconds", type=float, default=None, help="per throughput point")
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    parser.add_argument("--workloads", default=",".join(w.value for w in Workload))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plots", type=Path, default=None, help=f"default {PLOTS}")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--report", type=Path, default=None, help="only report on a results file")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--latency-rates", default=None, help="offered rates of the latency points, e.g. 1000,10000"
    )
    parser.add_argument("--latency-seconds", type=float, default=None, help="per latency point")
    args = parser.parse_args(argv)

    if args.report is not None:
        _finish(read_results(args.report), args)
        return 0
    workloads = frozenset(Workload(w) for w in args.workloads.split(",") if w)
    settings = settings_for(args.quick, args.seconds, workloads)
    if args.latency_rates:
        rates = tuple(int(r) for r in args.latency_rates.split(",") if r)
        settings = replace(settings, latency_rates=rates, latency_bytes=(100,))
    if args.latency_seconds:
        settings = replace(settings, latency_seconds=args.latency_seconds)
    names = [n for n in args.systems.split(",") if n]
    out = args.out or RESULTS / ("peers-quick.json" if args.quick else "peers.json")
    with tempfile.TemporaryDirectory(prefix="txms-peers-", dir=os.environ.get("BENCH_DIR")) as tmp:
        results = run(settings, names, Path(tmp), progress=not args.no_progress)
    results.meta["quick"] = args.quick
    write_results(out, results)
    _finish(results, args)
    for error in results.meta["errors"]:
        print(f"FAILED {error['task']}:\n{error['error']}", file=sys.stderr)
    return 1 if results.meta["errors"] else 0
