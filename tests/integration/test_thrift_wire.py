"""The Thrift server on the wire: golden reply bytes, Apache Thrift's own Python library
as an independent client, bad input, pipelining and concurrency. Real server on
127.0.0.1 port 0; only the clock is fake."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TApplicationException as ApacheAppException
from thrift.Thrift import TMessageType, TType
from thrift.transport import TSocket, TTransport

from tests.txn.harness import TxSystem, thrift_system
from txms_common.retry import RetryNTimes
from txn.codec import encode_transaction
from txn.errors import TxServiceUnavailableError
from txn.rpc.client import ThriftTxClient
from txn.transaction import NO_TX_IN_PROGRESS, Transaction


@pytest.fixture
def system() -> Iterator[TxSystem]:
    with thrift_system() as s:
        yield s


@pytest.fixture
def address(system: TxSystem) -> tuple[str, int]:
    assert isinstance(system.client, ThriftTxClient)
    return system.client.host, system.client.port


# -- raw framing helpers ------------------------------------------------------------


def message(name: str, seqid: int, args: bytes, mtype: int = 1) -> bytes:
    body = (
        struct.pack(">Ii", 0x80010000 | mtype, len(name))
        + name.encode()
        + struct.pack(">i", seqid)
        + args
    )
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=5)
    return sock


def test_golden_reply_bytes_of_start_short(system: TxSystem, address: tuple[str, int]) -> None:
    now_wp = system.clock.now_ms() * 1_000_000
    client_id = b"golden"
    args = b"\x0b\x00\x01" + struct.pack(">i", len(client_id)) + client_id + b"\x00"
    with connect(address) as sock:
        sock.sendall(message("startShortClientId", 7, args))
        reply = read_frame(sock)
    tx = Transaction(
        transaction_id=now_wp + 1,
        read_pointer=now_wp,
        first_short_in_progress=NO_TX_IN_PROGRESS,
        write_pointer=now_wp + 1,
    )
    name = b"startShortClientId"
    expected = (
        struct.pack(">Ii", 0x80010002, len(name)) + name + struct.pack(">i", 7)
        + b"\x0c\x00\x00" + encode_transaction(tx)  # field 0 "success": the TTransaction
        + b"\x00"  # end of the result struct
    )  # fmt: skip
    assert reply == expected


def test_pipelined_calls_answer_in_order(address: tuple[str, int]) -> None:
    with connect(address) as sock:
        sock.sendall(
            message("getSnapshot", 1, b"\x00")
            + message("status", 2, b"\x00")
            + message("invalidTxSize", 3, b"\x00")
        )
        seqids = []
        for _ in range(3):
            reply = read_frame(sock)
            name_len = struct.unpack(">i", reply[4:8])[0]
            seqids.append(struct.unpack(">i", reply[8 + name_len : 12 + name_len])[0])
    assert seqids == [1, 2, 3]


def _i64_field(field_id: int, value: int) -> bytes:
    return struct.pack(">bhq", 10, field_id, value)


def test_hot_calls_in_any_field_order_get_the_same_answers(
    system: TxSystem, address: tuple[str, int]
) -> None:
    """The server's hand-written decoders take the standard layout only; the same call
    with its fields in another order goes the generic way and must be answered alike,
    successes and declared errors."""
    with connect(address) as sock:

        def ask(name: str, seqid: int, args: bytes) -> bytes:
            sock.sendall(message(name, seqid, args))
            return read_frame(sock)

        for seqid, tx in enumerate((system.client.start_short(), system.client.start_short())):
            wp = tx.write_pointer
            standard = _i64_field(1, wp) + _i64_field(2, wp) + b"\x00"
            reordered = _i64_field(2, wp) + _i64_field(1, wp) + b"\x00"
            # the first commit goes one way, the second the other; both succeed
            first = ask("commitOrThrow", seqid, standard if seqid == 0 else reordered)
            again_standard = ask("commitOrThrow", 7, standard)
            again_reordered = ask("commitOrThrow", 7, reordered)
            assert first == message("commitOrThrow", seqid, b"\x00", mtype=2)[4:]
            # committing again is a declared error, encoded identically both ways
            assert struct.unpack(">I", again_standard[:4])[0] == 0x80010002
            assert b"not in progress" in again_standard
            assert again_standard == again_reordered


def test_unknown_method_gets_an_application_exception_and_the_connection_lives(
    address: tuple[str, int],
) -> None:
    with connect(address) as sock:
        sock.sendall(message("noSuchMethod", 1, b"\x00"))
        reply = read_frame(sock)
        assert struct.unpack(">I", reply[:4])[0] == 0x80010003  # EXCEPTION
        assert b"Unknown function noSuchMethod" in reply
        sock.sendall(message("status", 2, b"\x00"))
        assert b"OK" in read_frame(sock)


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        struct.pack(">i", -5) + b"abc",
        struct.pack(">i", 0),
        struct.pack(">i", 64 * 1024 * 1024),
        struct.pack(">i", 10) + b"\x00" * 10,  # not a message header
        message("status", 1, b"", mtype=2),  # a REPLY sent to the server
        message("commitOrThrow", 1, b"\x0a\x00\x01\x00\x00"),  # arguments cut short
    ],
)
def test_garbage_closes_that_connection_only(
    system: TxSystem, address: tuple[str, int], garbage: bytes
) -> None:
    with connect(address) as bad:
        bad.sendall(garbage)
        assert bad.recv(100) == b""  # closed by the server
    assert system.client.status() == "OK"
    tx = system.client.start_short()
    system.client.commit_or_throw(tx)


def test_a_truncated_frame_waits_and_a_disconnect_is_harmless(
    system: TxSystem, address: tuple[str, int]
) -> None:
    with connect(address) as sock:
        sock.sendall(message("status", 1, b"\x00")[:9])
    assert system.client.status() == "OK"


def test_undeclared_errors_are_application_exceptions(address: tuple[str, int]) -> None:
    args = b"\x08\x00\x01" + struct.pack(">i", -1) + b"\x00"  # startShortTimeout(-1)
    with connect(address) as sock:
        sock.sendall(message("startShortTimeout", 4, args))
        reply = read_frame(sock)
    assert struct.unpack(">I", reply[:4])[0] == 0x80010003
    assert b"timeout must be positive" in reply


def test_manager_not_running_is_retried_then_unavailable(
    system: TxSystem, address: tuple[str, int]
) -> None:
    system.manager.stop()
    client = ThriftTxClient(address, retry=RetryNTimes(3))
    assert client.status() == "NOTOK"
    with pytest.raises(TxServiceUnavailableError, match="not running"):
        client.start_short()
    client.close()


def test_unreachable_server_is_unavailable_after_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps: list[float] = []
    client = ThriftTxClient(("127.0.0.1", port), sleep=sleeps.append)
    with pytest.raises(TxServiceUnavailableError):
        client.status()
    assert sleeps == pytest.approx([0.1, 0.4, 1.6, 6.4, 25.6])


def test_many_concurrent_clients(system: TxSystem, address: tuple[str, int]) -> None:
    client = ThriftTxClient(address, pool_size=16, retry=RetryNTimes(1))
    ids: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        try:
            for i in range(40):
                tx = client.start_short()
                client.can_commit_or_throw(tx, [f"{n}-{i}".encode()])
                client.commit_or_throw(tx)
                with lock:
                    ids.append(tx.transaction_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(ids) == len(set(ids)) == 16 * 40
    snap = system.manager.get_snapshot()
    assert not snap.in_progress and not snap.invalid
    client.close()


# -- Apache Thrift's own library as the client ----------------------------------------


class ApacheClient:
    """Calls written with Apache Thrift's TBinaryProtocol, field by field."""

    def __init__(self, address: tuple[str, int]) -> None:
        sock = TSocket.TSocket(*address)
        self.transport = TTransport.TFramedTransport(sock)
        self.proto = TBinaryProtocol.TBinaryProtocol(self.transport)
        self.transport.open()
        self.seqid = 0

    def close(self) -> None:
        self.transport.close()

    def call(self, name: str, fields: list[tuple[int, int, Any]]) -> dict[int, Any]:
        p = self.proto
        self.seqid += 1
        p.writeMessageBegin(name, TMessageType.CALL, self.seqid)
        p.writeStructBegin(f"{name}_args")
        for fid, ftype, value in fields:
            p.writeFieldBegin(f"f{fid}", ftype, fid)
            if ftype == TType.STRING:
                p.writeString(value)
            elif ftype == TType.I64:
                p.writeI64(value)
            elif ftype == TType.I32:
                p.writeI32(value)
            elif ftype == TType.SET:
                p.writeSetBegin(TType.STRING, len(value))
                for item in value:
                    p.writeBinary(item)
                p.writeSetEnd()
            p.writeFieldEnd()
        p.writeFieldStop()
        p.writeStructEnd()
        p.writeMessageEnd()
        self.transport.flush()
        rname, mtype, rseqid = p.readMessageBegin()
        assert (rname, rseqid) == (name, self.seqid)
        if mtype == TMessageType.EXCEPTION:
            exc = ApacheAppException()
            exc.read(p)
            p.readMessageEnd()
            raise exc
        result = self._read_struct()
        p.readMessageEnd()
        return result

    def _read_struct(self) -> dict[int, Any]:
        p = self.proto
        out: dict[int, Any] = {}
        p.readStructBegin()
        while True:
            _, ftype, fid = p.readFieldBegin()
            if ftype == TType.STOP:
                break
            out[fid] = self._read_value(ftype)
            p.readFieldEnd()
        p.readStructEnd()
        return out

    def _read_value(self, ftype: int) -> Any:
        p = self.proto
        if ftype == TType.STRUCT:
            return self._read_struct()
        if ftype == TType.I64:
            return p.readI64()
        if ftype == TType.I32:
            return p.readI32()
        if ftype == TType.BOOL:
            return p.readBool()
        if ftype == TType.STRING:
            return p.readBinary()
        if ftype == TType.LIST:
            etype, size = p.readListBegin()
            items = [self._read_value(etype) for _ in range(size)]
            p.readListEnd()
            return items
        p.skip(ftype)
        return None


def test_apache_thrift_client_runs_a_transaction_and_sees_a_conflict(
    address: tuple[str, int],
) -> None:
    a = ApacheClient(address)
    try:
        tx1 = a.call("startShortClientId", [(1, TType.STRING, "clientA")])[0]
        tx2 = a.call("startShortClientId", [(1, TType.STRING, "clientB")])[0]
        assert tx2[1] > tx1[1] and tx2[4] == [tx1[1]]  # id, and tx1 in its in-progress list
        assert tx2[6] == 1 and tx2[7] == tx2[1] and tx2[9] == 1  # SHORT, wp == id, SNAPSHOT
        assert a.call("canCommitOrThrow", [(1, TType.I64, tx1[1]), (2, TType.SET, [b"row1"])]) == {}
        assert a.call("commitOrThrow", [(1, TType.I64, tx1[1]), (2, TType.I64, tx1[7])]) == {}
        conflict = a.call("canCommitOrThrow", [(1, TType.I64, tx2[1]), (2, TType.SET, [b"row1"])])
        assert conflict == {2: {1: tx2[1], 2: b"row1", 3: b"clientA"}}
        not_in_progress = a.call("commitOrThrow", [(1, TType.I64, tx1[1]), (2, TType.I64, tx1[1])])
        assert b"not in progress" in not_in_progress[1][1]
        assert a.call("invalidateTx", [(1, TType.I64, tx2[1])]) == {0: True}
        assert a.call("invalidTxSize", []) == {0: 1}
        assert a.call("truncateInvalidTx", []) == {0: {1: False}}
        generic = a.call(
            "startShortWithClientIdAndTimeOut", [(1, TType.STRING, "c"), (2, TType.I32, 0)]
        )
        assert generic[1][2] == b"java.lang.IllegalArgumentException"
        assert a.call("status", []) == {0: b"OK"}
        with pytest.raises(ApacheAppException):
            a.call("startShortTimeout", [(1, TType.I32, -3)])
    finally:
        a.close()


def test_apache_client_deprecated_methods(system: TxSystem, address: tuple[str, int]) -> None:
    a = ApacheClient(address)
    try:
        tx = a.call("startShort", [])[0]
        assert a.call("startLong", [])[0][6] == 2  # LONG
        assert a.call("pruneNow", []) == {}
        snapshot = a.call("getSnapshot", [])[0]
        assert snapshot[:1] == b"\x08"  # snapshot codec version 4
        later = system.clock.now_ms() + 1000
        too_long = a.call("truncateInvalidTxBefore", [(1, TType.I64, later)])
        assert b"are in-progress" in too_long[1][1]
        assert a.call("startShortWithTimeout", [(1, TType.I32, 5)])[0][1] > tx[1]
    finally:
        a.close()


def test_prune_now_reaches_the_pruner_once() -> None:
    from tests.txn.harness import in_process_system
    from tests.txn.test_prune import RecordingPlugin
    from txn.config import ServerConfig
    from txn.prune import TransactionPruner
    from txn.rpc.handler import TephraHandler
    from txn.rpc.server import ServerThread, new_server

    with in_process_system() as s:
        tx = s.manager.start_short()
        s.manager.invalidate(tx.transaction_id)
        s.clock.advance(2_000)  # older than the max lifetime: it can no longer write
        plugin = RecordingPlugin(tx.transaction_id)
        pruner = TransactionPruner(s.client, [plugin], max_lifetime_s=1, grace_s=0, clock=s.clock)
        server = ServerThread(
            new_server(s.manager, ServerConfig(port=0), TephraHandler(s.manager, pruner))
        )
        address = server.start()
        try:
            with ThriftTxClient(address, retry=RetryNTimes(1)) as client:
                client.prune_now()
                assert client.invalid_size() == 0
        finally:
            server.stop()
        assert len(plugin.asked) == 1 and len(plugin.completed) == 1
