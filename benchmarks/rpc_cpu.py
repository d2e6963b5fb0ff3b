"""CPU per operation of the binary protocol, against REST: what the server and the
client spend on each publish and each message read.

    python -m benchmarks.rpc_cpu [--seconds S] [--profile FILE] [--connections N]

Starts ``tms serve --rpc-port 0`` (LevelDB in a temporary directory) in a child process
and drives it from this process with one client, closed loop: one-message publishes,
100-message publishes, one-message publishes 64 at a time (``tms.aio``; on
``--connections`` connections, a client each), and polls of 1,000 and of 10 messages
from a topic of 100,000. For each, the server's CPU time (user + system, from
``/proc``) and this process's, divided by the operations: on a shared machine CPU time
per operation moves far less than throughput. ``--profile FILE`` runs the server
under cProfile and writes its statistics to FILE when it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tms.aio import AsyncMessagingClient
from tms.client import MessagingClient
from tms.model import TopicId

PAYLOAD = bytes(50) + os.urandom(50)
_HTTP = re.compile(r"listening on (http://[\d.]+:\d+)")
_RPC = re.compile(r"binary protocol listening on (tms://[\d.]+:\d+)")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, data: Path, profile: str | None) -> None:
        command = [sys.executable]
        if profile:
            command += ["-m", "cProfile", "-o", profile]
        command += ["-m", "tms.cli", "--log-level", "WARNING", "serve", "--data-dir",
                    str(data), "--port", "0", "--rpc-port", "0"]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.http = self.rpc = ""
        while not (self.http and self.rpc):
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("tms serve did not start")
            if m := _HTTP.search(line):
                self.http = m.group(1)
            if m := _RPC.search(line):
                self.rpc = m.group(1)

    def cpu(self) -> float:
        return cpu_s(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def measure(server: Server, run: Callable[[], int], seconds: float) -> dict[str, float]:
    """Run ``run`` (returns operations done) until ``seconds`` passed; CPU per op (µs)."""
    run()  # warm up
    ops = 0
    server_before, client_before, wall = server.cpu(), time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < seconds:
        ops += run()
    elapsed = time.perf_counter() - wall
    return {
        "ops_per_s": round(ops / elapsed, 1),
        "server_us": round((server.cpu() - server_before) / ops * 1e6, 2),
        "client_us": round((time.process_time() - client_before) / ops * 1e6, 2),
    }


def _publisher(client: MessagingClient, topic: TopicId, batch: int) -> Callable[[], int]:
    payloads = [PAYLOAD] * batch

    def run() -> int:
        for _ in range(20):
            client.publish(topic, payloads)
        return 20 * batch

    return run


def _reader(client: MessagingClient, topic: TopicId, page: int) -> Callable[[], int]:
    def run() -> int:
        got = client.poll(topic, start=0, limit=page).messages
        if len(got) != page:
            raise RuntimeError(f"read {len(got)} of {page}")
        return page

    return run


def _pipelined(
    url: str, topic: TopicId, window: int, connections: int = 1
) -> tuple[Callable[[], int], Any]:
    loop = asyncio.new_event_loop()
    clients = [AsyncMessagingClient(url) for _ in range(connections)]

    async def bursts(client: AsyncMessagingClient) -> None:
        for _ in range(10):
            await asyncio.gather(*[client.publish_nowait(topic, [PAYLOAD]) for _ in range(window)])

    async def burst() -> int:
        await asyncio.gather(*map(bursts, clients))
        return 10 * window * connections

    def close() -> None:
        for client in clients:
            loop.run_until_complete(client.close())
        loop.close()

    return lambda: loop.run_until_complete(burst()), close


def run_all(
    seconds: float,
    profile: str | None,
    transports: tuple[str, ...] = ("rest", "rpc"),
    connections: int = 1,
) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp) / "data", profile)
        try:
            urls = {"rest": server.http, "rpc": server.rpc}
            clients = {name: MessagingClient(urls[name]) for name in transports}
            admin = MessagingClient(server.http)
            read = TopicId("bench", "read")
            admin.create_topic(read)
            for _ in range(100):
                admin.publish(read, [PAYLOAD] * 1000)
            for name, client in clients.items():
                for batch in (1, 100):
                    topic = TopicId("bench", f"{name}_{batch}")
                    admin.create_topic(topic)
                    point = measure(server, _publisher(client, topic, batch), seconds)
                    results[f"publish x{batch} {name} (per message)"] = point
                results[f"poll 1000 {name} (per message)"] = measure(
                    server, _reader(client, read, 1000), seconds
                )
                results[f"poll 10 {name} (per message)"] = measure(
                    server, _reader(client, read, 10), seconds
                )
            topic = TopicId("bench", "pipelined")
            admin.create_topic(topic)
            run, close = _pipelined(server.rpc, topic, 64, connections)
            label = "64 in flight" if connections == 1 else f"{connections} x 64 in flight"
            try:
                results[f"publish x1, {label}, aio (per message)"] = measure(server, run, seconds)
            finally:
                close()
            for client in (*clients.values(), admin):
                client.close()
        finally:
            server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--transports", default="rest,rpc", help="rest, rpc or both")
    parser.add_argument(
        "--connections", type=int, default=1, help="connections of the 64-in-flight case"
    )
    args = parser.parse_args()
    transports = tuple(t for t in args.transports.split(",") if t)
    with contextlib.suppress(KeyboardInterrupt):
        for name, point in run_all(
            args.seconds, args.profile, transports, args.connections
        ).items():
            print(
                f"{name:48} {point['ops_per_s']:>10,.0f} /s  server {point['server_us']:7.2f} µs"
                f"  client {point['client_us']:7.2f} µs"
            )


if __name__ == "__main__":
    main()
