"""The Thrift server's resource limits (``txn.rpc.limits``), on a real server on loopback
port 0 (the one ``new_server`` picks for the suite's engine: the same rules hold for the
Python and the native server): the memory budget of unfinished frames, the frame and idle
timeouts, and huge calls handled off the event loop while small clients keep being
answered."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.integration.test_thrift_wire import message, read_frame
from tests.txn.harness import SYSTEM_CONFIG, TxSystem, in_process_system
from txms_common.retry import RetryNTimes
from txn.config import ServerConfig
from txn.errors import TransactionConflictError
from txn.rpc import wire
from txn.rpc.client import ThriftTxClient
from txn.rpc.limits import FrameBudget
from txn.rpc.server import ServerThread, TxServer, new_server

UNLIMITED = dataclasses.replace(
    SYSTEM_CONFIG, changeset_count_limit=2**31 - 1, changeset_size_limit=2**62
)


@contextmanager
def serving(config: ServerConfig) -> Iterator[tuple[TxSystem, Any, tuple[str, int]]]:
    with in_process_system(UNLIMITED) as s:
        server: TxServer = new_server(s.manager, config)
        thread = ServerThread(server)
        address = thread.start()
        try:
            yield s, server, address
        finally:
            thread.stop()


def closed_by_server(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# -- the frame budget ---------------------------------------------------------------------


def test_budget_grants_in_arrival_order_and_never_beyond_capacity() -> None:
    budget: FrameBudget[str] = FrameBudget(100)
    assert budget.reserve("a", 60)
    assert not budget.reserve("b", 50)  # would exceed: waits
    assert not budget.reserve("c", 10)  # fits, but nobody jumps the queue
    assert budget.used == 60 and budget.waiting == 2
    assert budget.release(60) == [("b", 50), ("c", 10)]
    assert budget.used == 60
    budget.forget("nobody")
    assert budget.release(60) == [] and budget.used == 0


def test_unfinished_frames_share_the_budget_and_all_complete() -> None:
    # Given a budget for two unfinished 1 MiB frames
    mib = 1024 * 1024
    config = ServerConfig(
        port=0, max_frame_bytes=mib, max_pending_frame_bytes=2 * mib, offload_frame_bytes=mib
    )
    with serving(config) as (s, server, address):
        txs = [s.manager.start_short() for _ in range(5)]
        frames = [
            wire.call_frame(
                b"canCommitOrThrow",
                wire.encode_can_commit_args(
                    tx.transaction_id, [b"%d-%07d" % (n, i) for i in range(60_000)]
                ),
            )
            for n, tx in enumerate(txs)
        ]
        assert all(mib // 2 < len(f) < mib for f in frames)
        socks = [socket.create_connection(address, timeout=30) for _ in frames]
        peak = 0
        # When five connections each send all but the last bytes of their frame
        for sock, frame in zip(socks, frames, strict=True):
            threading.Thread(target=sock.sendall, args=(frame[:-10],), daemon=True).start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and server.budget.waiting < 3:
            peak = max(peak, server.budget.used)
            time.sleep(0.005)
        # Then at most two hold reservations and the others wait, unread
        assert server.budget.waiting == 3
        assert server.budget.used <= 2 * mib
        # And when they finish their frames, every call is answered in turn
        for sock, frame in zip(socks, frames, strict=True):
            sock.sendall(frame[-10:])
        for sock in socks:
            reply = read_frame(sock)
            assert reply[:4] == b"\x80\x01\x00\x02" and reply.endswith(b"\x00")
            sock.close()
        assert server.budget.used == 0 and server.budget.waiting == 0
        assert peak <= 2 * mib


# -- timeouts -----------------------------------------------------------------------------


def test_a_stalled_frame_is_closed_after_the_frame_timeout() -> None:
    with serving(ServerConfig(port=0, frame_timeout_s=0.3)) as (_s, server, address):
        sock = socket.create_connection(address)
        sock.sendall(message("status", 1, b"\x00")[:9])  # and never the rest
        assert closed_by_server(sock)
        sock.close()
        assert server.budget.used == 0


def test_an_idle_connection_is_closed_and_the_client_reconnects() -> None:
    with serving(ServerConfig(port=0, idle_timeout_s=0.3)) as (_s, _server, address):
        idle = socket.create_connection(address)
        assert closed_by_server(idle)
        idle.close()
        # A pooled client connection closed while idle is replaced without a retry
        with ThriftTxClient(address, retry=RetryNTimes(1)) as client:
            assert client.status() == "OK"
            time.sleep(1.5)
            assert client.status() == "OK"


def test_a_connection_with_a_call_in_progress_is_not_idle() -> None:
    with serving(ServerConfig(port=0, idle_timeout_s=0.2)) as (s, _server, address):
        sock = socket.create_connection(address, timeout=10)
        gate = threading.Event()
        original = s.manager.get_snapshot

        def slow_snapshot():  # type: ignore[no-untyped-def]
            gate.wait(10)
            return original()

        s.manager.get_snapshot = slow_snapshot  # type: ignore[method-assign]
        sock.sendall(message("getSnapshot", 1, b"\x00"))
        time.sleep(0.8)  # four idle timeouts while the call runs
        gate.set()
        assert read_frame(sock)[:4] == b"\x80\x01\x00\x02"
        sock.close()


# -- huge calls ---------------------------------------------------------------------------


def test_small_clients_are_answered_while_a_huge_can_commit_is_processed() -> None:
    with serving(ServerConfig(port=0)) as (s, _server, address):
        huge_tx = s.manager.start_short()
        keys = [b"key-%08d" % i for i in range(1_000_000)]
        frame = wire.call_frame(
            b"canCommitOrThrow", wire.encode_can_commit_args(huge_tx.transaction_id, keys)
        )
        del keys
        small = ThriftTxClient(address, retry=RetryNTimes(1), timeout_s=60)
        small.status()  # connected before the huge call goes out
        done_before_huge: list[int] = []
        huge_answered = threading.Event()

        def small_client() -> None:
            n = 0
            while not huge_answered.is_set() and n < 10_000:
                tx = small.start_short()
                small.can_commit_or_throw(tx, [b"small-%d" % n])
                small.commit_or_throw(tx)
                n += 1
                if not huge_answered.is_set():
                    done_before_huge.append(n)

        with socket.create_connection(address, timeout=120) as sock:
            # When a client sends a canCommit with a million keys
            sock.sendall(frame)
            # and a small client runs transactions meanwhile
            worker = threading.Thread(target=small_client)
            worker.start()
            reply = read_frame(sock)
            huge_answered.set()
            worker.join(60)
        small.close()
        # Then the huge call succeeded, and the small client completed transactions
        # before it was answered
        assert reply == wire.void_reply(wire.reply_head(b"canCommitOrThrow"), b"\x00" * 4)[4:]
        assert len(done_before_huge) >= 3


def test_calls_behind_an_offloaded_one_run_after_it() -> None:
    config = ServerConfig(port=0, offload_frame_bytes=1024)
    with serving(config) as (s, _server, address):
        tx1 = s.manager.start_short()
        tx2 = s.manager.start_short()
        keys = [b"k-%05d" % i for i in range(200)]  # a frame above 1 KiB: offloaded
        can_commit = wire.call_frame(
            b"canCommitOrThrow", wire.encode_can_commit_args(tx1.transaction_id, keys)
        )
        commit = wire.call_frame(
            b"commitOrThrow", wire.encode_commit_args(tx1.transaction_id, tx1.write_pointer)
        )
        assert len(can_commit) > 1024 > len(commit)
        with socket.create_connection(address, timeout=30) as sock:
            # When canCommit and commit arrive together (pipelined)
            sock.sendall(can_commit + commit)
            first, second = read_frame(sock), read_frame(sock)
        assert b"canCommitOrThrow" in first and b"commitOrThrow" in second
        # Then the commit ran after the canCommit: its keys are committed, so a
        # transaction that started before it conflicts on them
        with pytest.raises(TransactionConflictError):
            s.manager.can_commit(tx2.transaction_id, [keys[7]])


def test_an_undecodable_offloaded_call_closes_its_connection() -> None:
    config = ServerConfig(port=0, offload_frame_bytes=64)
    with serving(config) as (s, _server, address):
        garbage = b"\x80\x01\x00\x01" + struct.pack(">i", 6) + b"status" + b"\x00" * 4
        garbage += b"\x0f\x00\x01\x0b" + struct.pack(">i", 10**6) + b"x" * 100
        with socket.create_connection(address, timeout=10) as sock:
            sock.sendall(struct.pack(">i", len(garbage)) + garbage)
            assert closed_by_server(sock)
        assert s.client.status() == "OK"
