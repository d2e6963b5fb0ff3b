"""The two engines of ``txn serve`` against each other and against the disk's own bound,
alternately (docs/benchmarks.md, "The native engine").

Each round measures, one after the other: the disk's bound (``group_commit_bound.c``, 16
clients, 200 µs commit delay), the same bound over sockets (``socket_bound.c``: 16 client
threads in another process, each cycle three blocking request/reply round trips over
loopback TCP to one epoll server that appends and syncs once a round; same commit delay),
then for each engine in turn (the order alternates between rounds) a fresh ``txn serve
--engine E`` with its state on disk driven by 16 Java threads on the client Apache Thrift
generates and by 16 ``ThriftTxClient`` threads, and a fresh ``txn serve --engine E
--in-memory`` driven by 16 Java threads; with the server's CPU per cycle over each measured
window. Medians over the rounds, and each durable median as a fraction of each bound's
median (``of_bound``, ``of_socket_bound``); each round records the machine's load average.
For the native engine's Java point, the server's group-commit rounds split into syncing,
handing out the replies and gathering the next calls (µs per round; ``round_us``), from the
line it logs when it stops.

With ``--against DIR`` the Python engine's place goes to the native engine of another
source tree (DIR, with its extension built in place, run through ``PYTHONPATH``): a change
to the native engine measured against the code before it, alternately.

With ``--state-dir DIR`` everything the runs write (the servers' state, the bounds' logs)
goes under DIR instead of the system's temporary directory: on a tmpfs (``/dev/shm``) a
sync costs next to nothing and a round is the socket work alone, the part the loop decides,
without the disk's noise (on a shared machine a sync swings from 0.2 to over 1 ms).

    python -m benchmarks.txn_engines [--rounds N] [--seconds S] [--against DIR] [--java-only]
                                     [--state-dir DIR] [--out FILE]

(also run by ``make bench-txn``, as its ``engines`` section)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import new_report, write_report
from benchmarks.txn_external import compile_bound, cpu_seconds, java_cycles

__all__ = ["compare_engines"]

ENGINES = ("python", "native")
RESULTS = Path(__file__).with_name("results")


def _bound(program: Path, root: Path, seconds: float) -> float:
    command = [program, 16, seconds, root / "bound.log", 1, 200]
    out = subprocess.run(list(map(str, command)), check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout)["cycles_per_second"])


def _socket_bound(program: Path, root: Path, seconds: float) -> dict[str, Any]:
    command = [program, 16, seconds, root / "socket-bound.log", 200]
    out = subprocess.run(list(map(str, command)), check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _thrift_client_cycles(address: tuple[str, int], pid: int, seconds: float) -> dict[str, Any]:
    """16 ``ThriftTxClient`` threads (in 4 processes), with the server's CPU per cycle."""
    from benchmarks.txn_bench import _drive_clients

    cpu0 = cpu_seconds(pid)
    run = _drive_clients("cycle", address, 16, seconds)
    cpu = cpu_seconds(pid) - cpu0  # includes the clients' warm-up: an upper bound
    return {**run, "server_cpu_us_per_cycle": round(cpu / max(1, run["ops"]) * 1e6, 1)}


@contextlib.contextmanager
def _source(tree: Path | None) -> Iterator[None]:
    """Servers started inside run the ``txn`` of ``tree`` (None: this checkout's)."""
    if tree is None:
        yield
        return
    # PYTHONSAFEPATH: ``python -m txn`` must not put the working directory (this checkout)
    # ahead of PYTHONPATH
    before = {name: os.environ.get(name) for name in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), before["PYTHONPATH"]]))
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def _engine_round(
    engine: str,
    root: Path,
    classes: Path | None,
    seconds: float,
    tree: Path | None = None,
    *,
    java_only: bool = False,
) -> dict[str, dict[str, Any]]:
    with _source(tree):
        return _engine_points(engine, root, classes, seconds, java_only)


def _engine_points(
    engine: str, root: Path, classes: Path | None, seconds: float, java_only: bool = False
) -> dict[str, dict[str, Any]]:
    from tests.integration.procs import ServerProcess

    points: dict[str, dict[str, Any]] = {}
    if classes is not None:  # a server of its own: its flush rounds are the Java load's
        server = ServerProcess(root / f"state-{engine}-java", "--engine", engine, log_level="INFO")
        address = server.start()
        try:
            assert server.proc is not None
            points["java_16"] = java_cycles(classes, address, server.proc.pid, 16, seconds)
        finally:
            server.terminate()
        points["java_16"].update(_rounds(server.output))
        if java_only:
            return points
    server = ServerProcess(root / f"state-{engine}", "--engine", engine)
    address = server.start()
    try:
        assert server.proc is not None
        points["thrift_tx_client_16"] = _thrift_client_cycles(address, server.proc.pid, seconds)
    finally:
        server.terminate()
    if classes is not None:
        server = ServerProcess(None, "--engine", engine)
        address = server.start()
        try:
            assert server.proc is not None
            points["java_16_in_memory"] = java_cycles(
                classes, address, server.proc.pid, 16, seconds
            )
        finally:
            server.terminate()
    return points


_ROUNDS = re.compile(
    r"group commit: (\d+) flush rounds, per round (\d+) µs syncing, (\d+) µs handing out "
    r"the replies, (\d+) µs gathering"
)


def _rounds(output: list[str]) -> dict[str, Any]:
    """The native engine's flush rounds over the server's life (the line it logs at stop;
    docs/txn.md, "The native engine"), or nothing (the Python engine logs none)."""
    for line in output:
        match = _ROUNDS.search(line)
        if match:
            rounds, sync, replies, calls = map(int, match.groups())
            return {
                "rounds": rounds,
                "round_us": {"sync": sync, "replies": replies, "calls": calls},
            }
    return {}


def compare_engines(
    root: Path, rounds: int, seconds: float, against: Path | None = None, java_only: bool = False
) -> dict[str, Any]:
    """The comparison of the module docstring (with ``java_only``, the Java client's durable
    point alone); sections it cannot run are noted."""
    variants: dict[str, tuple[str, Path | None]] = {e: (e, None) for e in ENGINES}
    if against is not None:
        variants = {"against": ("native", against.resolve()), "native": ("native", None)}
    names = tuple(variants)
    from tests.interop.__main__ import generate, missing_tools

    program = compile_bound(root)
    over_sockets = compile_bound(root, "socket_bound")
    missing = missing_tools()
    classes = None
    if not missing:
        _, classes = generate(root / "java-engines", Path(__file__).parent / "java" / "TxLoad.java")
    section: dict[str, Any] = {"rounds": [], "notes": []}
    if against is not None:
        section["against"] = str(against)
    if program is None:
        section["notes"].append("no C compiler: no bound")
    if classes is None:
        section["notes"].append(f"no Java client: needs {missing} (make interop-deps)")
    for r in range(rounds):
        one: dict[str, Any] = {"load_average": os.getloadavg()[0]}
        if program is not None:
            one["bound_16"] = _bound(program, root, seconds)
        if over_sockets is not None:
            one["socket_bound_16"] = _socket_bound(over_sockets, root, seconds)
        order = names if r % 2 == 0 else tuple(reversed(names))
        for name in order:
            engine, tree = variants[name]
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                one[name] = _engine_round(
                    engine, Path(tmp), classes, seconds, tree, java_only=java_only
                )
        section["rounds"].append(one)
        print(f"engines round {r + 1}: {json.dumps(one)}", flush=True)
    section["medians"] = _medians(section["rounds"], names)
    print(f"engines medians: {json.dumps(section['medians'])}", flush=True)
    return section


def _medians(rounds: list[dict[str, Any]], names: tuple[str, ...] = ENGINES) -> dict[str, Any]:
    out: dict[str, Any] = {}
    bounds = [r["bound_16"] for r in rounds if "bound_16" in r]
    if bounds:
        out["bound_16"] = statistics.median(bounds)
    runs = [r["socket_bound_16"] for r in rounds if "socket_bound_16" in r]
    sockets = [run["cycles_per_second"] for run in runs]
    if runs:
        out["socket_bound_16"] = {
            "per_second": statistics.median(sockets),
            "range": [min(sockets), max(sockets)],
            "server_cpu_us_per_cycle": statistics.median(
                run["server_cpu_us_per_cycle"] for run in runs
            ),
            "round_us": {
                k: statistics.median(run["round_us"][k] for run in runs)
                for k in runs[0]["round_us"]
            },
        }
    for engine in names:
        for point in rounds[0].get(engine, {}):
            runs = [r[engine][point] for r in rounds]
            median = statistics.median(run["per_second"] for run in runs)
            cpu = statistics.median(run["server_cpu_us_per_cycle"] for run in runs)
            entry = {
                "per_second": median,
                "range": [min(x["per_second"] for x in runs), max(x["per_second"] for x in runs)],
                "server_cpu_us_per_cycle": cpu,
            }
            phases = [run["round_us"] for run in runs if "round_us" in run]
            if phases:
                entry["round_us"] = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
            if bounds and not point.endswith("in_memory"):
                entry["of_bound"] = round(median / statistics.median(bounds), 2)
            if sockets and not point.endswith("in_memory"):
                entry["of_socket_bound"] = round(median / statistics.median(sockets), 2)
            out[f"{engine}/{point}"] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--against", type=Path, default=None, metavar="DIR")
    parser.add_argument(
        "--java-only", action="store_true", help="only the Java client's durable point"
    )
    parser.add_argument(
        "--state-dir", type=Path, default=None, metavar="DIR", help="where the runs write"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "txn-engines.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.state_dir) as tmp:
        section = compare_engines(
            Path(tmp), args.rounds, args.seconds, args.against, args.java_only
        )
    write_report(args.out, new_report("txn-engines", seconds_per_point=args.seconds, **section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
