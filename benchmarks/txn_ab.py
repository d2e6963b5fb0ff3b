"""Two versions of ``txn serve`` compared alternately (A B A B ...): lean transaction
cycles from N connections on one event loop (``txn_bench``'s ``saturation_async_lean``),
each server with its state on local disk in a fresh directory.

    python -m benchmarks.txn_ab --a DIR --b DIR [--rounds 4] [--seconds 6]
                                [--connections 16]

``DIR`` is a checkout (e.g. ``git archive main | tar -x -C /tmp/main``); ``.`` is this
one. The VM is noisy (±30 %): only the per-round pairs and their median ratio mean
something. Prints one line per run and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from benchmarks.txn_bench import _saturate


def _serve(source: Path, data_dir: Path) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "txn", "--log-level", "WARNING", "serve",
         "--data-dir", str(data_dir), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=source,
        env={**os.environ, "PYTHONPATH": str(source), "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if m := re.search(r"listening on ([\d.]+):(\d+)", line):
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, (m.group(1), int(m.group(2)))
    raise RuntimeError(f"txn serve from {source} did not start")


def _us(r: dict[str, Any]) -> float:
    """The server's CPU per cycle, in microseconds."""
    return round(r["server_cpus"] / r["per_second"] * 1e6, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True)
    parser.add_argument("--b", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        for round_ in range(args.rounds):
            for name in ("a", "b"):
                source = getattr(args, name).resolve()
                proc, address = _serve(source, Path(tmp) / f"{name}-{round_}")
                try:
                    r = _saturate(address, proc.pid, args.connections, args.seconds)
                finally:
                    proc.terminate()
                    proc.wait(60)
                results[name].append(r)
                print(f"round {round_} {name} ({source}): {r}", flush=True)
    ratios = [
        b["per_second"] / a["per_second"] for a, b in zip(results["a"], results["b"], strict=True)
    ]
    summary = {
        "connections": args.connections,
        "a": str(args.a),
        "b": str(args.b),
        "a_per_second": [r["per_second"] for r in results["a"]],
        "b_per_second": [r["per_second"] for r in results["b"]],
        "a_server_us_per_cycle": [_us(r) for r in results["a"]],
        "b_server_us_per_cycle": [_us(r) for r in results["b"]],
        "median_b_over_a": round(statistics.median(ratios), 3),
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
