"""The physical limits, measured in the same run: raw LevelDB (plyvel) and raw loopback HTTP.

* ``PlyvelLimit``: what the storage under txms does with no messaging on top. A publish
  is one ``write_batch(sync=True)`` of the batch's values under increasing keys; a read
  is one iterator over the next keys; a transaction cycle is three synced 64-byte writes
  (a Tephra cycle is three durable log edits). One database per topic, in this process
  (LevelDB allows one process per database): callers are threads (plyvel releases the
  GIL while LevelDB works).
* ``EchoServer`` + ``HttpEchoLimit``: what a request over loopback HTTP costs with
  nothing behind it. The server (a separate process, one asyncio event loop on uvloop, as
  txms's) reads each request whole and answers 200 with the same body; the client is
  ``LeanHttp``, the load generator that also drives txms's REST API (``txms-lean``), with
  the very bytes txms is sent (an Avro publish request).
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import multiprocessing as mp
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import plyvel

from benchmarks.peers.base import Call, Cursor, Kind, SystemBase, Workload
from tms.codec import avro

__all__ = ["EchoServer", "HttpEchoLimit", "LeanHttp", "PlyvelLimit", "PlyvelReader"]

_SUBSCRIBE_WAIT_S = 1.0


# -- raw LevelDB --------------------------------------------------------------------------


class _Topic:
    """One topic's database and its next sequence number (``next`` on an
    ``itertools.count`` is atomic under the GIL, so threads never share a key)."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        # the options txms's own LevelDBStore opens its database with
        self.db = plyvel.DB(
            str(path),
            create_if_missing=True,
            write_buffer_size=64 << 20,
            lru_cache_size=64 << 20,
            bloom_filter_bits=10,
        )
        self.seq = itertools.count(1)
        self.changed = threading.Condition()

    @staticmethod
    def key(seq: int) -> bytes:
        return b"m" + seq.to_bytes(8, "big")

    def append(self, payloads: Sequence[bytes], *, sync: bool) -> None:
        with self.db.write_batch(sync=sync) as wb:
            for p in payloads:
                wb.put(self.key(next(self.seq)), p)


class PlyvelReader:
    """See ``base.Reader``. A cursor is the last key read (``b"m"`` before the first)."""

    def __init__(self, topic: _Topic) -> None:
        self.topic = topic

    def first(self) -> Cursor:
        return b"m"

    def read(self, cursor: Cursor, limit: int) -> tuple[list[bytes], Cursor]:
        it = self.topic.db.iterator(start=cursor, include_start=False, stop=b"n")
        try:
            rows = list(islice(it, limit))
        finally:
            it.close()
        return [v for _, v in rows], rows[-1][0] if rows else cursor

    def close(self) -> None:
        return None


class PlyvelLimit(SystemBase):
    name = "plyvel"
    kind = Kind.LIMIT
    description = "raw LevelDB (plyvel): synced write_batch per publish, iterator per read"
    durable = True
    forks = False
    workloads = frozenset(
        {
            Workload.PUBLISH,
            Workload.CONSUME,
            Workload.TAIL,
            Workload.LATENCY,
            Workload.TX_CYCLE,
            Workload.GROWTH,
        }
    )

    def __init__(self, root: Path) -> None:
        self.root = root / "plyvel"
        self.topics: dict[str, _Topic] = {}
        self._cycles: _Topic | None = None

    def create_topic(self, topic: str) -> None:
        self.topics[topic] = _Topic(self.root / topic)

    def drop_topic(self, topic: str) -> None:
        t = self.topics.pop(topic, None)
        if t is not None:
            t.db.close()
            shutil.rmtree(t.path, ignore_errors=True)

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        t = self.topics[topic]
        n = len(batch)

        def call() -> int:
            t.append(batch, sync=True)
            return n

        return call

    def tx_cycle(self, key: bytes) -> Call:
        if self._cycles is None:
            self._cycles = _Topic(self.root / "_cycles")
        db = self._cycles.db
        edit = key.ljust(64, b".")

        def call() -> int:
            for kind in (b"s", b"c", b"C"):  # start, can-commit, commit: one edit each
                db.put(kind + key, edit, sync=True)
            return 1

        return call

    def sender(self, topic: str) -> Callable[[bytes], None]:
        t = self.topics[topic]

        def send(payload: bytes) -> None:
            t.append((payload,), sync=True)
            with t.changed:
                t.changed.notify_all()

        return send

    def subscribe(self, topic: str, stop: Callable[[], bool]) -> Iterator[bytes]:
        t = self.topics[topic]
        reader = PlyvelReader(t)

        def follow() -> Iterator[bytes]:
            cursor = reader.first()
            while not stop():
                with t.changed:
                    payloads, cursor = reader.read(cursor, 1000)
                    if not payloads:
                        t.changed.wait(_SUBSCRIBE_WAIT_S)
                yield from payloads

        return follow()

    def reader(self, topic: str) -> PlyvelReader:
        return PlyvelReader(self.topics[topic])

    def fill(self, topic: str, count: int, payload: bytes) -> None:
        t = self.topics[topic]
        for start in range(0, count, 10_000):
            t.append([payload] * min(10_000, count - start), sync=False)

    def mark(self, topic: str) -> Cursor:
        it = self.topics[topic].db.iterator(
            start=b"m", stop=b"n", reverse=True, include_value=False
        )
        try:
            return next(it, b"m")
        finally:
            it.close()

    def close(self) -> None:
        for topic in list(self.topics):
            self.drop_topic(topic)
        if self._cycles is not None:
            self._cycles.db.close()
            self._cycles = None


# -- raw HTTP -----------------------------------------------------------------------------


class LeanHttp:
    """A load generator's HTTP client: one keep-alive connection (``http.client``, which
    sets TCP_NODELAY), the request built once, the answer read whole and checked to be
    200. It costs the client far less CPU per request than ``requests`` does."""

    def __init__(self, url: str, path: str, body: bytes, content_type: str) -> None:
        host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
        self.conn = http.client.HTTPConnection(host, int(port or 80))
        self.path = path
        self.body = body
        self.headers = {"Content-Type": content_type}

    def post(self) -> bytes:
        self.conn.request("POST", self.path, body=self.body, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"POST {self.path}: HTTP {response.status} {data[:200]!r}")
        return data

    def close(self) -> None:
        self.conn.close()


class _EchoProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive and pipelining; every request is answered 200 with its
    own body. Only ``Content-Length`` bodies (all our clients send)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in bytes(self.buffer[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )


def _serve_echo(port_out: Any) -> None:
    from txms_common.loop import new_event_loop

    loop = new_event_loop()
    server = loop.run_until_complete(
        loop.create_server(_EchoProtocol, "127.0.0.1", 0, reuse_address=True)
    )
    port_out.put(server.sockets[0].getsockname()[1])
    loop.run_forever()


class EchoServer:
    """The echo server in a process of its own; ``url`` once started."""

    def __init__(self) -> None:
        ctx = mp.get_context("fork")
        self._port: Any = ctx.Queue()
        self._proc = ctx.Process(target=_serve_echo, args=(self._port,), daemon=True)
        self.url = ""

    def start(self) -> str:
        self._proc.start()
        self.url = f"http://127.0.0.1:{self._port.get(timeout=30)}"
        return self.url

    def stop(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(10)


class HttpEchoLimit(SystemBase):
    name = "http-echo"
    kind = Kind.LIMIT
    description = "raw loopback HTTP echo (uvloop protocol server, http.client load generator)"
    durable = False
    forks = True
    workloads = frozenset({Workload.PUBLISH})

    def __init__(self, url: str) -> None:
        self.url = url

    def create_topic(self, topic: str) -> None:
        return None

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        client = LeanHttp(
            self.url, "/echo", avro.encode_publish_request(None, batch), "avro/binary"
        )
        n = len(batch)
        return lambda: (client.post(), n)[1]
