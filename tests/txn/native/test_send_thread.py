"""The native server's send thread (txn/native/src/sender.c, ``[server] send_thread``): when
a sync releases the replies of many connections, a second thread sends them while the loop
reads on; without it (the default) the loop sends them itself. Real
servers on loopback port 0, raw sockets as clients: every reply arrives, in request order,
through a full socket, and with connections closing while their replies are in flight."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.integration.test_thrift_wire import message, read_frame
from tests.txn.faulty_storage import FaultyStorage
from tests.txn.harness import SYSTEM_CONFIG
from tests.txn.rpc.test_server_sync import eventually
from txn import native
from txn.config import ServerConfig
from txn.engine import resolve
from txn.errors import InvalidArgumentError
from txn.manager import TransactionManager
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.server import ServerThread, new_server

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built")


@contextmanager
def native_server(
    storage: MemoryStorage | None = None, *, send_thread: bool = True, commit_delay_us: int = 0
) -> Iterator[tuple[tuple[str, int], object, TransactionManager]]:
    storage = storage if storage is not None else MemoryStorage()
    manager = TransactionManager(
        SYSTEM_CONFIG, TransactionStateStore(storage), engine=resolve("native")
    )
    manager.start()
    config = ServerConfig(port=0, commit_delay_us=commit_delay_us, send_thread=send_thread)
    server = new_server(manager, config)
    thread = ServerThread(server)
    address = thread.start()
    try:
        yield address, server.core, manager  # type: ignore[attr-defined]
    finally:
        thread.stop()
        manager.stop()


def start_calls(n: int) -> bytes:
    """n framed ``startShort`` calls, seqids 0..n-1."""
    return b"".join(message("startShort", seqid, b"\x00") for seqid in range(n))


def write_pointer(reply: bytes) -> tuple[int, int]:
    """(seqid, write pointer) of a ``startShort`` success: the TTransaction's first field."""
    size = struct.unpack(">i", reply[4:8])[0]
    seqid = struct.unpack(">i", reply[8 + size : 12 + size])[0]
    body = reply[12 + size :]
    assert body[:3] == b"\x0c\x00\x00", body[:16]  # result field 0: the transaction
    assert body[3:6] == b"\x0a\x00\x01", body[:16]  # its field 1: writePointer (i64)
    return seqid, struct.unpack(">q", body[6:14])[0]


def read_all(sock: socket.socket, n: int) -> list[tuple[int, int]]:
    return [write_pointer(read_frame(sock)) for _ in range(n)]


@contextmanager
def one_flush(storage: FaultyStorage, address: tuple[str, int]) -> Iterator[None]:
    """What is sent inside the block is answered by one flush: the loop is held in a flush
    (of another connection's call) until the block ends."""
    storage.gate.clear()
    storage.holding.clear()
    with socket.create_connection(address, timeout=20) as trigger:
        trigger.sendall(start_calls(1))
        assert storage.holding.wait(20)
        try:
            yield
        finally:
            storage.gate.set()
        check(read_all(trigger, 1), 1)


def check(got: list[tuple[int, int]], n: int) -> None:
    assert [seqid for seqid, _ in got] == list(range(n))  # request order
    pointers = [wp for _, wp in got]
    assert pointers == sorted(pointers) and len(set(pointers)) == n


def test_the_send_thread_is_off_unless_configured() -> None:
    assert ServerConfig().send_thread is False
    with pytest.raises(InvalidArgumentError):
        ServerConfig(send_thread="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("send_thread", [True, False], ids=["send-thread", "loop-only"])
def test_the_replies_of_many_connections_arrive_complete_and_in_order(send_thread: bool) -> None:
    storage = FaultyStorage()
    with native_server(storage, send_thread=send_thread) as (address, core, _):
        n, calls = 16, 300
        socks = [socket.create_connection(address, timeout=20) for _ in range(n)]
        try:
            # When 16 connections each pipeline 300 calls, synced together
            with one_flush(storage, address):
                for sock in socks:
                    sock.sendall(start_calls(calls))
            got = [read_all(sock, calls) for sock in socks]
        finally:
            for sock in socks:
                sock.close()
        # Then each got every answer, in its own order, and no write pointer twice
        for one in got:
            check(one, calls)
        assert len({wp for one in got for _, wp in one}) == n * calls
        batches, connections, _ = core.send_batches  # type: ignore[attr-defined]
        if send_thread:  # syncs that released several connections handed them over
            assert batches > 0 and connections >= 4 * batches
        else:  # the loop sent every reply itself
            assert batches == connections == 0


@pytest.mark.parametrize("commit_delay_us", [0, 200, 100_000])
def test_clients_in_step_are_answered_round_after_round(commit_delay_us: int) -> None:
    """Each client waits for its reply before its next call, as the Thrift clients do: the
    loop reads the calls that come in while it still sends a round's replies, and the round
    they complete is flushed without waiting for anything more (else every client waits for
    the others, the commit delay or a socket timeout)."""
    with native_server(send_thread=False, commit_delay_us=commit_delay_us) as (address, _, _):
        n, calls = 16, 150 if commit_delay_us < 100_000 else 20
        got: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        failures: list[BaseException] = []

        def client(i: int) -> None:
            try:
                with socket.create_connection(address, timeout=20) as sock:
                    for seqid in range(calls):
                        sock.sendall(message("startShort", seqid, b"\x00"))
                        got[i].append(write_pointer(read_frame(sock)))
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not failures
        for one in got:
            check(one, calls)
        assert len({wp for one in got for _, wp in one}) == n * calls


def test_a_client_that_does_not_read_gets_everything_once_it_reads() -> None:
    storage = FaultyStorage()
    with native_server(storage) as (address, core, _):
        n, calls = 6, 2000
        socks = []
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            sock.settimeout(20)
            sock.connect(address)
            socks.append(sock)
        try:
            # When clients with small receive buffers send many calls, synced together, and
            # read nothing yet
            with one_flush(storage, address):
                for sock in socks:
                    sock.sendall(start_calls(calls))
            # the sends to them stop short: the send batch leaves the rest to the loop
            assert eventually(lambda: core.send_batches[2] > 0)  # type: ignore[attr-defined]
            time.sleep(0.2)
            # Then, once they read, every answer comes, in order (with a larger window now:
            # small ones make the reading slow)
            for sock in socks:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, 1 << 20)
            got = [read_all(sock, calls) for sock in socks]
        finally:
            for sock in socks:
                sock.close()
        for one in got:
            check(one, calls)


def test_connections_closing_while_their_replies_are_sent_leave_the_others_whole() -> None:
    with native_server() as (address, core, manager):
        for _ in range(5):
            keep = [socket.create_connection(address, timeout=20) for _ in range(4)]
            drop = [socket.create_connection(address, timeout=20) for _ in range(8)]
            try:
                # When half the connections reset right after sending their calls
                for sock in drop + keep:
                    sock.sendall(start_calls(200))
                for sock in drop:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.close()
                # and new connections come and go meanwhile (descriptors get reused)
                for _ in range(8):
                    socket.create_connection(address, timeout=20).close()
                # Then the others get all their answers, in order
                for sock in keep:
                    check(read_all(sock, 200), 200)
            finally:
                for sock in keep:
                    sock.close()
        # and the server closes every one of them and serves on
        assert eventually(lambda: core.connections == 0)  # type: ignore[attr-defined]
        with socket.create_connection(address, timeout=20) as sock:
            sock.sendall(start_calls(3))
            check(read_all(sock, 3), 3)
        assert manager.log.failure is None


def test_flush_rounds_split_their_time_into_syncing_replying_and_gathering() -> None:
    storage = FaultyStorage()
    with (
        native_server(storage) as (address, core, _),
        socket.create_connection(address, timeout=20) as sock,
    ):
        sent = [0.0]  # when the last call was sent: its flush ended after that

        def call(seqid: int) -> None:
            sent[0] = time.monotonic()
            sock.sendall(message("startShort", seqid, b"\x00"))
            write_pointer(read_frame(sock))

        call(0)
        began, before = sent[0], core.rounds  # type: ignore[attr-defined]
        # When one client makes 20 calls one after the other, each its own flush
        for seqid in range(1, 21):
            call(seqid)
        after = core.rounds  # type: ignore[attr-defined]
        # Then each flush closed a round, and the phases account for no more than the
        # time that passed
        assert after[0] - before[0] == 20
        assert all(a >= b for a, b in zip(after[1:], before[1:], strict=True))
        assert sum(after[1:]) - sum(before[1:]) <= time.monotonic() - began
        # When a sync is held for 0.3 s while 16 connections' calls wait for it
        began, before = sent[0], after
        with one_flush(storage, address):
            time.sleep(0.3)
            clients = [socket.create_connection(address, timeout=20) for _ in range(16)]
            for client in clients:
                client.sendall(start_calls(1))
        for client in clients:
            check(read_all(client, 1), 1)
            client.close()
        call(21)
        after = core.rounds  # type: ignore[attr-defined]
        # Then the time it was held is counted as syncing, not as anything else
        assert after[1] - before[1] >= 0.3
        assert sum(after[1:]) - sum(before[1:]) <= time.monotonic() - began
