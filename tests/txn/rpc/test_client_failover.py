"""The client across lost answers and dead servers: a list of addresses, and a commit
whose answer was lost (a proxy that drops it: fault injection, real servers)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from txms_common.retry import RetryNTimes
from txms_testing import free_port
from txn.config import ServerConfig, TxConfig
from txn.errors import TransactionNotInProgressError
from txn.manager import TransactionManager
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.client import ThriftTxClient
from txn.rpc.server import ServerThread, ThriftServer


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    manager = TransactionManager(
        TxConfig(cleanup_interval_s=0, snapshot_interval_s=0),
        TransactionStateStore(MemoryStorage()),
    )
    manager.start()
    thread = ServerThread(ThriftServer(manager, ServerConfig(port=0)))
    address = thread.start()
    yield address
    thread.stop()
    manager.stop()


def _recv_frame(sock: socket.socket) -> bytes:
    header = b""
    while len(header) < 4:
        chunk = sock.recv(4 - len(header))
        if not chunk:
            raise EOFError
        header += chunk
    size = int.from_bytes(header, "big")
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise EOFError
        body += chunk
    return header + body


class AnswerDroppingProxy:
    """Forwards framed calls to ``target``; the reply to the first call whose frame
    contains ``method`` is dropped and the client's connection closed (the call took
    effect, the caller never learns it)."""

    def __init__(self, target: tuple[str, int], method: bytes) -> None:
        self.target = target
        self.method = method
        self.dropped = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = self._listener.getsockname()[:2]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with (
            client,
            socket.create_connection(self.target) as upstream,
            contextlib.suppress(OSError, EOFError),
        ):
            while True:
                call = _recv_frame(client)
                upstream.sendall(call)
                reply = _recv_frame(upstream)
                if self.method in call and self.dropped == 0:
                    self.dropped += 1
                    return  # the answer is lost
                client.sendall(reply)

    def close(self) -> None:
        self._listener.close()


def test_a_commit_whose_answer_was_lost_is_reported_committed(server: tuple[str, int]) -> None:
    # Given a proxy that drops the answer to the first commit it forwards
    proxy = AnswerDroppingProxy(server, b"commitOrThrow")
    with ThriftTxClient(proxy.address, retry=RetryNTimes(3)) as client:
        tx = client.start_short()
        client.can_commit_or_throw(tx, [b"row"])
        # When the commit is applied but its answer lost, and the retry finds it gone
        client.commit_or_throw(tx)  # Then the client reports the commit that happened
        assert proxy.dropped == 1
        probe = client.start_short()
        assert probe.is_visible(tx.transaction_id)
        client.abort(probe)
    proxy.close()


def test_a_retried_commit_of_an_aborted_transaction_still_fails(server: tuple[str, int]) -> None:
    with ThriftTxClient(server) as client:
        tx = client.start_short()
        client.abort(tx)
        with pytest.raises(TransactionNotInProgressError):
            client.commit_or_throw(tx)  # no lost answer: reported as the server says


def test_an_address_list_moves_past_a_dead_server(server: tuple[str, int]) -> None:
    dead = ("127.0.0.1", free_port())
    with ThriftTxClient([dead, server], retry=RetryNTimes(2)) as client:
        assert client.status() == "OK"
        assert client.address == server
    with ThriftTxClient(f"127.0.0.1:{dead[1]},{server[0]}:{server[1]}") as client:
        assert client.status() == "OK"
