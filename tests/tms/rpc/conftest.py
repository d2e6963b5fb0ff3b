"""The binary protocol's server on loopback port 0 over a real LevelDB store, beside the
REST service, and a raw socket speaking frames to it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.fakes import FakeClock
from tms.config import TmsConfig
from tms.http.auth import Authorizer
from tms.http.config import HttpConfig
from tms.http.server import HttpServer, HttpServerThread
from tms.model import TopicId
from tms.rpc.config import RpcConfig
from tms.rpc.frames import (
    FLAG_ERROR,
    Frame,
    Kind,
    decode_body,
    encode_body,
    encode_frame,
    read_frames,
    rpc,
)
from tms.rpc.server import RpcServer
from tms.service import MessagingService
from tms.store.kv import Fence, KeyValueStore, TableStore, Update, WriteOp
from tms.store.leveldb import LevelDBStore
from tms.store.tables import MESSAGE_TABLE

NOW = 1_700_000_000_000
T = TopicId("ns", "t")


class CountingPool(ThreadPoolExecutor):
    """A real worker pool that keeps the futures of the calls handed to it."""

    def __init__(self) -> None:
        super().__init__(2)
        self.calls: list[Future[Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.calls.append(future)
        return future


class GatedStore:
    """A real store whose writes wait while ``gate`` is closed, and its reads while
    ``read_gate`` is (fault injection: a disk that stalls); ``waiting`` and
    ``reading`` tell that one did. Each scan of the message table (a read of messages)
    first raises the next error of ``scan_faults``, if any (a read that fails)."""

    def __init__(self, inner: KeyValueStore) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()
        self.read_gate = threading.Event()
        self.read_gate.set()
        self.reading = threading.Event()
        self.scan_faults: list[Exception] = []

    @property
    def epoch(self) -> int:
        return self.inner.epoch

    def table(self, name: bytes) -> TableStore:
        return cast(TableStore, _GatedReads(self.inner.table(name), self, name))

    def write(
        self,
        ops: Sequence[WriteOp],
        *,
        sync: bool = True,
        epoch: int | None = None,
        fence: Fence | None = None,
        updates: Sequence[Update] = (),
        new_keys: bool = False,
    ) -> None:
        if not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(30)
        self.inner.write(
            ops,
            sync=sync,
            epoch=epoch,
            fence=fence,
            updates=updates,
            new_keys=new_keys,
        )

    def acquire_fence(self, name: bytes) -> int:
        return self.inner.acquire_fence(name)

    def close(self) -> None:
        self.gate.set()
        self.read_gate.set()
        self.inner.close()


class _GatedReads:
    """A table whose calls wait while its store's ``read_gate`` is closed (its writes:
    while ``gate`` is)."""

    def __init__(self, inner: TableStore, store: GatedStore, table: bytes) -> None:
        self._inner = inner
        self._store = store
        self._table = table

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        scan = (self._table, name) == (MESSAGE_TABLE, "scan_chunks")

        def gated(*args: Any, **kwargs: Any) -> Any:
            if name == "write" and not self._store.gate.is_set():  # a table's own write
                self._store.waiting.set()
                self._store.gate.wait(30)
            elif not self._store.read_gate.is_set():
                self._store.reading.set()
                self._store.read_gate.wait(30)
            if scan and self._store.scan_faults:
                raise self._store.scan_faults.pop(0)
            return attr(*args, **kwargs)

        return gated


@dataclass
class Served:
    url: str
    http_url: str
    address: tuple[str, int]
    service: MessagingService
    store: GatedStore
    clock: FakeClock
    server: RpcServer
    thread: HttpServerThread


@pytest.fixture
def make_rpc(tmp_path: Path) -> Iterator[Any]:
    started: list[tuple[HttpServerThread, HttpServerThread, MessagingService]] = []

    def make(
        config: RpcConfig | None = None,
        authorizer: Authorizer | None = None,
        tls: tuple[str, str] | None = None,
    ) -> Served:
        clock = FakeClock(NOW)
        store = GatedStore(LevelDBStore(tmp_path / f"db{len(started)}"))
        service = MessagingService(store, TmsConfig(tx_max_lifetime_s=10**10), clock=clock)
        service.create_topic(T)
        http_config = HttpConfig(port=0)
        if tls is not None:
            http_config = HttpConfig(port=0, tls_cert_file=tls[0], tls_key_file=tls[1])
        http = HttpServerThread(HttpServer(service, http_config, authorizer))
        http_url = http.start()
        config = config or RpcConfig(port=0)
        server = RpcServer(
            service,
            config,
            authorizer,
            http_port=int(http_url.rsplit(":", 1)[1]),
            http_tls=tls is not None,
        )
        thread = HttpServerThread(server)
        url = thread.start()
        started.append((thread, http, service))
        return Served(url, http_url, server.address, service, store, clock, server, thread)

    yield make
    for thread, http, service in started:
        thread.stop()
        http.stop()
        service.close()


@pytest.fixture
def served(make_rpc: Any) -> Served:
    return make_rpc(RpcConfig(port=0))  # type: ignore[no-any-return]


def refused(address: tuple[str, int]) -> bool:
    """The server no longer accepts connections (waiting at most 10 s for it)."""
    for _ in range(1000):
        try:
            socket.create_connection(address, timeout=1).close()
        except OSError:
            return True
        time.sleep(0.01)
    return False


class Raw:
    """A socket speaking frames by hand."""

    def __init__(self, address: tuple[str, int], timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.buf = b""
        self.next_id = 0

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, op: int, body: Any, *, timeout_ms: int = 0, rid: int | None = None) -> int:
        if rid is None:
            self.next_id += 1
            rid = self.next_id
        self.send(encode_frame(Kind.REQUEST, op, rid, encode_body(body), timeout_ms=timeout_ms))
        return rid

    def hello(self, token: str | None = None) -> Frame:
        self.request(0, rpc.Hello(version=1, token=token))
        return self.frame()

    def frame(self) -> Frame:
        while True:
            frames, used = read_frames(self.buf, 1 << 26, limit=1)
            if frames:
                self.buf = self.buf[used:]
                return frames[0]
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("closed")
            self.buf += data

    def closed(self) -> bool:
        """The server closed the connection (after what it sent)."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except (ConnectionResetError, TimeoutError):
            return False

    def close(self) -> None:
        self.sock.close()


def error_of(frame: Frame) -> tuple[str, str]:
    assert frame.flags & FLAG_ERROR, frame
    error = decode_body(rpc.Error, frame.body)
    return error.code, error.message


@pytest.fixture
def raw(served: Served) -> Iterator[Raw]:
    conn = Raw(served.address)
    yield conn
    conn.close()
