"""The native log wakes the server's loop after a flush another thread led: a reply the loop
parked while that flush ran (its own flush had to stand aside) goes out once the edit is
durable, with nothing else to wake the loop. (The loop's own flushes do not write the
log's eventfd: it looks at their outcome in the same turn.)"""

from __future__ import annotations

import socket
import threading

import pytest

from tests.txn.faulty_storage import FaultyStorage
from tests.txn.harness import SYSTEM_CONFIG
from tests.txn.native.test_send_thread import check, read_all, start_calls
from tests.txn.rpc.test_server_sync import eventually
from txn import native
from txn.config import ServerConfig
from txn.engine import resolve
from txn.manager import TransactionManager
from txn.persist.store import TransactionStateStore
from txn.rpc.server import ServerThread, new_server

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built")


def test_a_reply_parked_behind_a_flush_led_from_python_goes_out() -> None:
    storage = FaultyStorage()
    manager = TransactionManager(
        SYSTEM_CONFIG, TransactionStateStore(storage), engine=resolve("native")
    )
    manager.start()
    # no sweeps of the limits: nothing but the log can wake the loop
    config = ServerConfig(port=0, commit_delay_us=0, frame_timeout_s=0, idle_timeout_s=0)
    server = new_server(manager, config)
    thread = ServerThread(server)
    address = thread.start()
    core = server.core  # type: ignore[attr-defined]
    try:
        # Given a flush led from Python (an in-process start), held in its sync
        storage.gate.clear()
        storage.holding.clear()
        in_process = threading.Thread(target=manager.start_short)
        in_process.start()
        assert storage.holding.wait(20)
        with socket.create_connection(address, timeout=20) as sock:
            # When a client's call is answered in C meanwhile (its edit waits: the loop
            # cannot flush while that flush runs), and then the held flush ends
            sock.sendall(start_calls(1))
            assert eventually(lambda: core.waiting == 1)
            storage.gate.set()
            in_process.join(20)
            # Then the loop, woken by the log, flushes the edit and the reply arrives
            check(read_all(sock, 1), 1)
    finally:
        storage.gate.set()
        thread.stop()
        manager.stop()
