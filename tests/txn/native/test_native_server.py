"""The native engine against the Python one, on real servers on loopback port 0: the same
calls get the same bytes back, leave the same state and the same log edits; the hot calls
really are answered in C; a log that cannot be written fails the server without a single
false answer. (The rest of the suite runs on the native engine too: ``make test``.)"""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes import FakeClock
from tests.integration.test_thrift_wire import message, read_frame
from tests.txn.harness import SYSTEM_CONFIG
from tests.txn.rpc.test_server_sync import eventually
from txms_common.clock import SYSTEM_CLOCK
from txms_common.retry import RetryNTimes
from txn import native
from txn.config import ServerConfig
from txn.engine import resolve
from txn.errors import TxStorageError
from txn.manager import ManagerState, TransactionManager
from txn.native.server import NativeThriftServer
from txn.persist.local import LocalDirStorage
from txn.persist.log_codec import LogReader
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.rpc import wire
from txn.rpc.client import ThriftTxClient
from txn.rpc.server import ServerThread, TxServer, new_server

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built")


@dataclass
class Served:
    manager: TransactionManager
    server: TxServer
    storage: MemoryStorage
    address: tuple[str, int]


@contextmanager
def served(engine: str, storage: MemoryStorage | None = None) -> Iterator[Served]:
    storage = storage if storage is not None else MemoryStorage()
    manager = TransactionManager(
        SYSTEM_CONFIG, TransactionStateStore(storage), FakeClock(), engine=resolve(engine)
    )
    manager.start()
    server = new_server(manager, ServerConfig(port=0, commit_delay_us=0))
    thread = ServerThread(server)
    address = thread.start()
    try:
        yield Served(manager, server, storage, address)
    finally:
        thread.stop()
        manager.stop()


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(field: int, value: bytes) -> bytes:
    return b"\x0b\x00" + bytes([field]) + struct.pack(">i", len(value)) + value


def timeout(field: int, value: int) -> bytes:
    return b"\x08\x00" + bytes([field]) + struct.pack(">i", value)


def script(first_tx: int) -> list[tuple[str, bytes]]:
    """Calls of every hot kind, in and out of the standard layout, successes and each
    kind of failure; ``first_tx`` is the id the first start will get."""
    tx = [first_tx + i for i in range(8)]
    can = wire.encode_can_commit_args
    big = [b"%02d" % i for i in range(45)]  # past changeset_count_warn (40)
    return [
        ("startShort", b"\x00"),
        ("startLong", b"\x00"),
        ("startShortClientId", string(1, b"client-1") + b"\x00"),
        ("startShortWithTimeout", timeout(1, 10) + b"\x00"),
        ("startShortWithClientIdAndTimeOut", string(1, b"c2") + timeout(2, 20) + b"\x00"),
        ("startShortClientId", string(1, b"\xff\xfe") + b"\x00"),  # not UTF-8
        ("startShortWithTimeout", timeout(1, 0) + b"\x00"),  # IllegalArgument
        ("startShortWithTimeout", timeout(1, 10 * 86_400) + b"\x00"),  # above the maximum
        ("canCommitOrThrow", can(tx[0], [b"k1", b"k1", b"k2"])),  # a key twice
        ("commitOrThrow", wire.encode_commit_args(tx[0], tx[0])),
        ("canCommitOrThrow", can(tx[2], [b"k2", b"k3"])),  # conflict with tx0
        ("canCommitOrThrow", can(tx[3], big)),  # over the warning count: generic path
        ("canCommitOrThrow", can(tx[4], [b"%02d" % i for i in range(60)])),  # over the limit
        ("canCommitOrThrow", can(tx[4], [b"x" * 1100])),  # over the warning size
        ("commitOrThrow", wire.encode_commit_args(tx[3], tx[3])),
        ("commitOrThrow", wire.encode_commit_args(12345, 12345)),  # not in progress
        ("canCommitOrThrow", can(12345, [b"a"])),  # not in progress
        # fields in another order: the generic path
        ("commitOrThrow", b"\x0a\x00\x02" + i64(tx[4]) + b"\x0a\x00\x01" + i64(tx[4]) + b"\x00"),
        ("canCommitOrThrow", can(tx[1], [])),  # a long transaction, no keys
        ("commitOrThrow", wire.encode_commit_args(tx[1], tx[1])),
        ("invalidateTx", b"\x0a\x00\x01" + i64(tx[2]) + b"\x00"),
        ("commitOrThrow", wire.encode_commit_args(tx[2], tx[2])),  # invalid: not in progress
        ("invalidTxSize", b"\x00"),
        ("status", b"\x00"),
        ("startShortClientId", string(1, b"client-1") + b"\x00"),
        ("noSuchMethod", b"\x00"),
    ]


def replies(address: tuple[str, int], calls: list[tuple[str, bytes]]) -> list[bytes]:
    with socket.create_connection(address, timeout=10) as sock:
        out = []
        for seqid, (name, args) in enumerate(calls):
            sock.sendall(message(name, seqid, args))
            out.append(read_frame(sock))
        return out


def log_edits(storage: MemoryStorage) -> list[object]:
    return [edit for ts in sorted(storage.logs) for edit in LogReader(bytes(storage.logs[ts]))]


def test_the_same_calls_get_the_same_bytes_state_and_log_from_both_engines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    results = {}
    warnings = {}
    for engine in ("python", "native"):
        caplog.clear()
        with served(engine) as s:
            first = s.manager.machine.next_write_pointer(s.manager.clock.now_ms())
            results[engine] = (
                replies(s.address, script(first)),
                s.manager.get_snapshot(),
                log_edits(s.storage),
            )
            if engine == "native":
                answered_in_c, in_python = s.server.core.stats  # type: ignore[attr-defined]
        warnings[engine] = [r.getMessage() for r in caplog.records if "change set" in r.message]
    python, native_ = results["python"], results["native"]
    for i, (a, b) in enumerate(zip(python[0], native_[0], strict=True)):
        assert a == b, (i, script(0)[i][0], a, b)
    assert python[1] == native_[1]
    assert python[2] == native_[2] and python[2]
    # a change set past a warning threshold is logged, as the manager does
    assert warnings["python"] == warnings["native"] and len(warnings["python"]) == 2
    # the successes of the standard layout were answered in C, the rest in Python
    assert answered_in_c >= 8 and in_python >= 12


class FullDiskStorage(MemoryStorage):
    """Fault injection: logs whose descriptor is /dev/full, so every write fails with
    ENOSPC (the native log writes descriptors directly, without Python)."""

    def __init__(self) -> None:
        super().__init__()
        self.fds: list[int] = []

    def create_log(self, timestamp_ms: int) -> object:  # type: ignore[override]
        log = super().create_log(timestamp_ms)
        fd = os.open("/dev/full", os.O_WRONLY)
        self.fds.append(fd)

        class FullLog:
            def write(self, data: bytes) -> None:
                raise TxStorageError("No space left on device")

            def sync(self) -> None:
                log.sync()

            def close(self) -> None:
                log.close()

            def fileno(self) -> int:
                return fd

        return FullLog()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_full_disk_fails_the_server_and_no_call_is_answered_ok(engine: str) -> None:
    storage = FullDiskStorage()
    try:
        with served(engine, storage) as s:
            with socket.create_connection(s.address, timeout=10) as sock:
                # When the first call's edit cannot be written
                sock.sendall(message("startShort", 1, b"\x00"))
                # Then the connection closes unanswered, and the manager has failed
                with pytest.raises((EOFError, ConnectionResetError)):
                    read_frame(sock)
            assert s.manager.state is ManagerState.FAILED
            assert s.manager.log.failure is not None
            with socket.create_connection(s.address, timeout=10) as again:
                again.sendall(message("startShort", 2, b"\x00"))
                with pytest.raises((EOFError, ConnectionResetError)):
                    read_frame(again)
    finally:
        for fd in storage.fds:
            os.close(fd)


DELAY_S = 3600.0
"""Longer than any test: a call held back by the delay is never answered in time, so the
checks below are about who waits, not about how long anything took."""


def test_the_commit_delay_waits_for_recently_answered_connections_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rule of txn.rpc.group_commit, kept by the C loop (test_server_sync has the same
    # test for the Python server), with a delay far beyond the configurable 0.1 s
    from txn.native.server import NativeThriftServer

    settings = NativeThriftServer._settings
    monkeypatch.setattr(
        NativeThriftServer,
        "_settings",
        lambda self: {**settings(self), "commit_delay_us": int(DELAY_S * 1e6)},
    )
    manager = TransactionManager(
        SYSTEM_CONFIG, TransactionStateStore(LocalDirStorage(tmp_path)), engine=resolve("native")
    )
    manager.start()
    server = new_server(manager, ServerConfig(port=0, commit_delay_us=100_000))
    assert isinstance(server, NativeThriftServer)
    thread = ServerThread(server)
    address = thread.start()
    core = server.core
    assert core is not None
    # a call not answered in 10 s fails
    a = ThriftTxClient(address, retry=RetryNTimes(1), timeout_s=10)
    b = ThriftTxClient(address, retry=RetryNTimes(1), timeout_s=10)
    try:
        # A lone client is never held back: its own answer does not count.
        for _ in range(5):
            a.start_short()
        # A was just answered and stays quiet: B's call is parked, waiting for A.
        answered: list[int] = []
        parked = threading.Thread(target=lambda: answered.append(b.start_short().write_pointer))
        parked.start()
        assert eventually(lambda: core.waiting == 1)
        assert answered == []
        # A calls meanwhile: one flush answers both.
        syncs = manager.log.stats.syncs
        a.start_short()
        parked.join(10)
        assert len(answered) == 1
        assert manager.log.stats.syncs == syncs + 1
        # Both were answered, then quiet for a whole delay: not waited for.
        core.age_answers(DELAY_S)
        b.start_short()
    finally:
        a.close()
        b.close()
        thread.stop()
        manager.stop()


class HeldSnapshotStorage(MemoryStorage):
    """Fault injection: once ``hold`` is set, a snapshot write waits for ``go`` (the
    manager is then STOPPING with its log still open)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.entered = threading.Event()
        self.go = threading.Event()

    def write_snapshot(self, timestamp_ms: int, data: bytes) -> None:
        if self.hold:
            self.entered.set()
            self.go.wait(10)
        super().write_snapshot(timestamp_ms, data)


def test_a_stopping_manager_takes_the_hot_calls_off_the_c_path() -> None:
    answers = {}
    for engine in ("python", "native"):
        storage = HeldSnapshotStorage()
        with served(engine, storage) as s:
            core = getattr(s.server, "core", None)
            with socket.create_connection(s.address, timeout=10) as sock:
                sock.sendall(message("startShort", 1, b"\x00"))
                read_frame(sock)
                in_c = core.stats[0] if core is not None else 0
                # When the manager is stopping (its final snapshot held) under the server
                storage.hold = True
                stopping = threading.Thread(target=s.manager.stop)
                stopping.start()
                try:
                    assert storage.entered.wait(10)
                    assert s.manager.state is ManagerState.STOPPING
                    sock.sendall(message("startShort", 2, b"\x00"))
                    answers[engine] = read_frame(sock)
                finally:
                    storage.go.set()
                    stopping.join()
                # Then the call is answered as the manager says, not by the C hot path
                assert core is None or core.stats[0] == in_c
    assert answers["python"] == answers["native"]
    assert b"Transaction Manager is not running." in answers["native"]


@contextmanager
def served_in_memory() -> Iterator[tuple[TransactionManager, NativeThriftServer, tuple[str, int]]]:
    """A native manager without storage on the wall clock, its native server on port 0."""
    manager = TransactionManager(SYSTEM_CONFIG, engine=resolve("native"))
    manager.start()
    server = new_server(manager, ServerConfig(port=0, commit_delay_us=0))
    assert isinstance(server, NativeThriftServer)
    thread = ServerThread(server)
    address = thread.start()
    try:
        yield manager, server, address
    finally:
        thread.stop()
        manager.stop()


def test_the_wall_clock_is_read_in_c_like_the_manager_reads_it() -> None:
    with served_in_memory() as (manager, server, address):
        before = SYSTEM_CLOCK.now_ms()
        with socket.create_connection(address, timeout=10) as sock:
            sock.sendall(message("startShortWithTimeout", 1, timeout(1, 30) + b"\x00"))
            read_frame(sock)
        after = SYSTEM_CLOCK.now_ms()
        assert server.core is not None
        assert server.core.stats[0] == 1  # answered in C
        (wp,) = manager.machine.in_progress_ids()
        entry = manager.machine.entry(wp)
        assert entry is not None
        assert before + 30_000 <= entry.expiration_ms <= after + 30_000
