"""Memory of a queue holding many scheduled messages: ``tms serve`` (a real process, on
LevelDB) gets N messages due in a day (random payloads) over the binary protocol; its
resident memory is read from ``/proc`` before, after the enqueues, after receives and
stats on the full queue, and after a restart on the same data (and its first receive),
beside the data's size on disk.

    python -m benchmarks.queue_memory [--messages 1000000] [--payload 100] [--batch 10000]
        [--threads 4] [--data-dir DIR] [--out FILE]

Prints one JSON line (and writes it to ``--out``). A measurement, not a test: nothing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tms.client import MessagingClient
from tms.model import TopicId
from tms.queues import EnqueueItem

_RPC = re.compile(r"binary protocol listening on (tms://[\d.]+:\d+)")
QUEUE = TopicId("bench", "scheduled")
DAY_MS = 86_400_000


def _mib(pid: int) -> dict[str, float]:
    """Resident memory now and at its peak, MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            values["rss" if key == "VmRSS" else "peak"] = round(int(value.split()[0]) / 1024, 1)
    return values


def _disk_mib(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)


class _Server:
    def __init__(self, data_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tms.cli", "--log-level", "WARNING", "serve",
             "--data-dir", str(data_dir), "--port", "0", "--rpc-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        found: list[str] = []
        ready = threading.Event()

        def pump() -> None:  # read all along: a full pipe would stall the server
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if not found and (match := _RPC.search(line)):
                    found.append(match.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60) or not found:
            self.stop()
            raise RuntimeError("tms serve did not start")
        self.url = found[0]

    def memory(self) -> dict[str, float]:
        return _mib(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def _enqueue(url: str, messages: int, payload: int, batch: int, threads: int) -> float:
    """Enqueue ``messages`` due in a day from ``threads`` threads; seconds taken.
    Payloads are random (incompressible: the store cannot shrink them on disk)."""
    per_thread = messages // threads

    def work() -> None:
        with MessagingClient(url, timeout_s=120) as client:
            queue = client.queue(QUEUE)
            left = per_thread
            while left:
                n = min(batch, left)
                data = os.urandom(n * payload)
                items = [
                    EnqueueItem(data[i * payload : (i + 1) * payload], delay_ms=DAY_MS)
                    for i in range(n)
                ]
                queue.enqueue(items)
                left -= n

    started = time.perf_counter()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - started


def _use(url: str, receives: int) -> dict[str, Any]:
    """Receives (nothing is due) and a stats call on the full queue."""
    with MessagingClient(url) as client:
        queue = client.queue(QUEUE)
        got = sum(len(queue.receive(100)) for _ in range(receives))
        stats = queue.stats()
    return {"received": got, "scheduled": stats.scheduled, "ready": stats.ready}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=100, help="bytes per message")
    parser.add_argument("--batch", type=int, default=10_000, help="messages per enqueue")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--receives", type=int, default=100)
    parser.add_argument("--data-dir", type=Path, help="default: a new temporary directory")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    root = args.data_dir or Path(tempfile.mkdtemp(prefix="queue-memory-"))
    data = root / "tms"
    report: dict[str, Any] = {"messages": args.messages, "payload_bytes": args.payload}
    try:
        server = _Server(data)
        try:
            with MessagingClient(server.url) as admin:
                admin.create_topic(QUEUE, {"kind": "queue"})
            report["started"] = server.memory()
            seconds = _enqueue(server.url, args.messages, args.payload, args.batch, args.threads)
            report["enqueue_per_s"] = round(args.messages / seconds)
            report["after_enqueue"] = server.memory()
            report["use"] = _use(server.url, args.receives)
            report["after_receives"] = server.memory()
        finally:
            server.stop()
        report["disk_mib"] = _disk_mib(data)
        server = _Server(data)  # a restart on the full queue
        try:
            report["restarted"] = server.memory()
            report["use_after_restart"] = _use(server.url, args.receives)
            report["after_restart_receives"] = server.memory()
        finally:
            server.stop()
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    line = json.dumps(report)
    print(line)
    if args.out is not None:
        args.out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
