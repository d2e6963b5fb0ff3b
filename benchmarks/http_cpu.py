"""Server CPU per HTTP request: what the REST service's request path costs, apart from
the client.

    python -m benchmarks.http_cpu [--requests N]

Starts the messaging service alone (``HttpServer`` on LevelDB, port 0) in a child
process, sends ``GET /ping``, ``GET /v1/namespaces/ns/topics/t`` (a topic read: routing,
name checks, a worker-thread hop) and publishes of 1 and of 100 messages of 100 bytes
(the write path: decoding, the topic's group commit, a synced LevelDB write; one request
at a time, so each is a batch of its own) over one kept-alive connection, and divides the
child's CPU time (user + system, from ``/proc``) by the requests. CPU time rather than
throughput, because on a shared machine CPU time per request moves far less than wall
time. Compare two checkouts by running this file in each, alternately (the child imports
the checkout it runs in, and nothing of the project's beyond the service).
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SERVER = """
import asyncio, sys
from pathlib import Path
from tms.http.server import HttpServer
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.model import TopicId
try:
    from uvloop import new_event_loop
except ImportError:
    from asyncio import new_event_loop

async def main() -> None:
    service = MessagingService(LevelDBStore(Path(sys.argv[1])))
    service.create_topic(TopicId("ns", "t"))
    from tms.http.app import HttpConfig
    server = HttpServer(service, HttpConfig(port=0))
    host, port = await server.start()
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop()
    service.close()

with asyncio.Runner(loop_factory=new_event_loop) as runner:
    runner.run(main())
"""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


TOPIC = "/v1/namespaces/ns/topics/t"
PAYLOAD = os.urandom(50) + bytes(50)


def _publish_body(count: int) -> bytes:
    """An Avro PublishRequest (no transaction) of ``count`` payloads, encoded by hand so
    that this file needs nothing of the checkout it measures."""
    out = bytearray(b"\x02")  # union branch 1 (null): no write pointer
    out += _long(count)
    for _ in range(count):
        out += _long(len(PAYLOAD)) + PAYLOAD
    out += b"\x00"
    return bytes(out)


def _long(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


REQUESTS: dict[str, tuple[str, str, bytes | None]] = {
    "ping": ("GET", "/ping", None),
    "get_topic": ("GET", TOPIC, None),
    "publish_1": ("POST", TOPIC + "/publish", _publish_body(1)),
    "publish_100": ("POST", TOPIC + "/publish", _publish_body(100)),
}


def _send(conn: http.client.HTTPConnection, name: str, n: int) -> None:
    method, path, body = REQUESTS[name]
    headers = {"Content-Type": "avro/binary"} if body is not None else {}
    for _ in range(n):
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status}")


def measure(requests: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        child = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(Path(tmp) / "db")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        conn = http.client.HTTPConnection("127.0.0.1", port)
        results = {}
        try:
            for name in REQUESTS:
                _send(conn, name, 500)  # warm up
                before = _cpu_s(child.pid)
                _send(conn, name, requests)
                results[name] = (_cpu_s(child.pid) - before) / requests * 1e6
        finally:
            conn.close()
            child.stdin.close()
            child.wait(60)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    for name, us in measure(args.requests).items():
        print(f"{name}: {us:.1f} us server CPU per request")


if __name__ == "__main__":
    main()
