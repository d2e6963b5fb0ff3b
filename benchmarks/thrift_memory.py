"""Memory of the Thrift server under unfinished frames: N connections each send all but
the last bytes of a large frame and stall; the server's resident memory is read from
``/proc`` (current and peak) while they hold.

    python -m benchmarks.thrift_memory [--connections 64] [--frame-mib 16]
        [--sent-mib 15] [--server-config TOML] [--source DIR]

``--source`` runs the server from another checkout (to compare with an older version);
``--server-config`` passes a ``[server]`` table (e.g. ``max_pending_frame_bytes``).
Prints one JSON line. A measurement, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path


def _status(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            values[key] = int(value.split()[0]) // 1024  # MiB
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--frame-mib", type=float, default=16)
    parser.add_argument("--sent-mib", type=float, default=15)
    parser.add_argument("--server-config", type=Path)
    parser.add_argument("--source", type=Path, help="checkout to run the server from")
    parser.add_argument(
        "--settle-s", type=float, default=5.0, help="stop once memory has not grown this long"
    )
    parser.add_argument("--max-s", type=float, default=120.0)
    args = parser.parse_args(argv)

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.source is not None:
        env["PYTHONPATH"] = str(args.source.resolve())
    command = [sys.executable, "-m", "txn", "--log-level", "WARNING", "serve", "--in-memory"]
    command += ["--port", "0"]
    if args.server_config is not None:
        command += ["--config", str(args.server_config)]
    server = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=args.source,  # python -m looks in the working directory first
    )
    try:
        assert server.stdout is not None
        address = None
        while address is None:
            line = server.stdout.readline()
            if not line:
                raise RuntimeError("the server did not start")
            if m := re.search(r"listening on ([\d.]+):(\d+)", line):
                address = (m.group(1), int(m.group(2)))
        threading.Thread(target=server.stdout.read, daemon=True).start()
        before = _status(server.pid)
        frame_bytes = int(args.frame_mib * 1024 * 1024) - 8
        body = b"\x80\x01\x00\x01" + struct.pack(">i", 6) + b"status" + b"\x00" * 4
        sent = int(args.sent_mib * 1024 * 1024)
        data = struct.pack(">i", frame_bytes) + body + b"\x00" * (sent - len(body))
        socks = [socket.create_connection(address) for _ in range(args.connections)]
        started = time.monotonic()

        def send(sock: socket.socket) -> None:
            with contextlib.suppress(OSError):  # closed at the end while still blocked
                sock.sendall(data)

        senders = [threading.Thread(target=send, args=(s,), daemon=True) for s in socks]
        for t in senders:
            t.start()
        # Until every sender is through, or the server's memory stops growing
        grew_at = time.monotonic()
        peak = 0
        while time.monotonic() - started < args.max_s:
            time.sleep(0.5)
            rss = _status(server.pid)["VmRSS"]
            if rss > peak + 1:
                peak, grew_at = rss, time.monotonic()
            if not any(t.is_alive() for t in senders):
                break
            if time.monotonic() - grew_at > args.settle_s:
                break
        peak_during = _status(server.pid)
        unsent = sum(1 for t in senders if t.is_alive())
        for sock in socks:
            sock.close()
        print(
            json.dumps(
                {
                    "connections": args.connections,
                    "frame_mib": args.frame_mib,
                    "sent_mib_each": args.sent_mib,
                    "rss_mib_before": before["VmRSS"],
                    "rss_mib_while_holding": peak_during["VmRSS"],
                    "peak_rss_mib": peak_during["VmHWM"],
                    "senders_still_blocked": unsent,
                    "seconds": round(time.monotonic() - started, 1),
                    "source": str(args.source or "this checkout"),
                }
            ),
            flush=True,
        )
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
