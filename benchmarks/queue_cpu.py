"""Server CPU per message of the work-queue round (enqueue + receive + ack over the
binary protocol), and where it goes.

    python -m benchmarks.queue_cpu [--seconds S] [--workers N] [--profile FILE]

Starts ``tms serve`` (LevelDB in a temporary directory) in a child process and drives
the peers benchmark's queue workload against it (``benchmarks.peers``: ``N`` competing
closed-loop workers, batch 100, 100-byte messages). Prints messages/s and the server's
CPU time (user + system, from ``/proc``) per message: on a shared machine CPU per
message moves far less than throughput. ``--profile FILE`` runs the server with one
cProfile per thread (the writers' threads are where a queue's work is done) and writes
their merged statistics to FILE when it stops; cProfile counts wall time, so read the
shares, not the microseconds.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import os
import re
import runpy
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.server_probe import merge_profiles, profile_threads

_HTTP = re.compile(r"listening on (http://[\d.]+:\d+)")
_RPC = re.compile(r"binary protocol listening on (tms://[\d.]+:\d+)")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve_profiled(out: str, argv: list[str]) -> None:
    """Run ``tms.cli argv`` with a cProfile in every thread; merge them into ``out``."""
    profiles: list[cProfile.Profile] = []
    profile_threads(profiles)
    main = cProfile.Profile()
    profiles.append(main)

    def dump() -> None:
        main.disable()
        merge_profiles(profiles, out)

    atexit.register(dump)
    sys.argv = ["tms.cli", *argv]
    main.enable()
    runpy.run_module("tms.cli", run_name="__main__")


@contextmanager
def served(data: str, profile: str | None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``tms serve`` on ``data`` in a child process (with ``profile``: one cProfile per
    thread, written there when it stops): the process and its binary protocol's URL;
    terminated on leaving."""
    serve = ["--log-level", "WARNING", "serve", "--data-dir", data, "--port", "0",
             "--rpc-port", "0"]  # fmt: skip
    if profile:
        command = [sys.executable, "-m", "benchmarks.queue_cpu", "--serve-profiled",
                   os.path.abspath(profile), *serve]  # fmt: skip
    else:
        command = [sys.executable, "-m", "tms.cli", *serve]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        rpc = ""
        while not rpc:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("tms serve did not start")
            if m := _RPC.search(line):
                rpc = m.group(1)
        yield proc, rpc
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--profile", metavar="FILE")
    parser.add_argument("--serve-profiled", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_profiled:
        _serve_profiled(args.serve_profiled[0], args.serve_profiled[1:])
        return
    from benchmarks.peers.txms import TxmsRpc
    from benchmarks.peers.workloads import measure_queue

    with tempfile.TemporaryDirectory() as data, served(data, args.profile) as (proc, rpc):
        system: Any = TxmsRpc(rpc, "")
        cpu, wall = _cpu_s(proc.pid), time.perf_counter()
        rate = measure_queue(
            system, "queue_cpu", batch=100, workers=args.workers, seconds=args.seconds
        )
        cpu, wall = _cpu_s(proc.pid) - cpu, time.perf_counter() - wall
        system.close()
    messages = rate * args.seconds
    print(
        f"{rate:,.0f} msg/s; server CPU {cpu / max(messages, 1) * 1e6:.1f} µs per message "
        f"({cpu / wall:.2f} CPUs)"
    )


if __name__ == "__main__":
    main()
