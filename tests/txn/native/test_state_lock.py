"""The manager's state lock on the native engine (``txn.native._core.StateLock``): it
behaves as ``threading.Lock`` for Python code, and the native server's hot calls take the
same lock in C, so a Python thread holding it holds them off."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import pytest

from tests.integration.test_thrift_wire import message, read_frame
from tests.txn.native.test_native_server import served_in_memory
from txn import native
from txn.engine import StateLock

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built")


def native_lock() -> StateLock:
    from txn.native._core import StateLock as NativeStateLock

    return NativeStateLock()


LOCKS: list[Callable[[], StateLock]] = [threading.Lock, native_lock]


@pytest.mark.parametrize("new_lock", LOCKS, ids=["threading", "native"])
def test_the_lock_behaves_as_threading_lock(new_lock: Callable[[], StateLock]) -> None:
    lock = new_lock()
    assert not lock.locked()
    assert lock.acquire() is True
    assert lock.locked()
    assert lock.acquire(False) is False
    assert lock.acquire(blocking=False) is False
    assert lock.acquire(timeout=0.01) is False
    with pytest.raises(ValueError):
        lock.acquire(False, 1)
    with pytest.raises(ValueError):
        lock.acquire(timeout=-2)
    releaser = threading.Thread(target=lock.release)  # any thread may release it
    releaser.start()
    releaser.join()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()
    with lock:
        assert lock.locked()
        assert lock.acquire(timeout=0.01) is False
    assert not lock.locked()
    with pytest.raises(KeyError), lock:
        raise KeyError("released on the way out")
    assert not lock.locked()


@pytest.mark.parametrize("new_lock", LOCKS, ids=["threading", "native"])
def test_the_lock_excludes_threads_and_wakes_a_waiter(new_lock: Callable[[], StateLock]) -> None:
    lock = new_lock()
    counter = [0]

    def bump() -> None:
        for _ in range(2_000):
            with lock:
                value = counter[0]
                counter[0] = value + 1

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter[0] == 8_000
    lock.acquire()
    got = threading.Event()

    def wait_for_it() -> None:
        assert lock.acquire(timeout=30)
        got.set()
        lock.release()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert not got.wait(0.05)
    lock.release()
    waiter.join()
    assert got.is_set()


def test_the_native_server_takes_the_managers_lock_in_c() -> None:
    with served_in_memory() as (manager, server, address):
        assert server.core is not None
        # The manager's lock is the C one (the server would refuse any other)
        assert type(manager.state_lock).__module__ == "txn.native._core"
        with socket.create_connection(address, timeout=10) as sock:
            # While a Python thread holds the manager's lock
            with manager.state_lock:
                sock.sendall(message("startShort", 1, b"\x00"))
                sock.settimeout(0.3)
                # Then the hot call waits for it
                with pytest.raises(TimeoutError):
                    sock.recv(1)
                assert not manager.machine.in_progress_ids()
            # And once released, it is answered in C
            sock.settimeout(10)
            read_frame(sock)
        assert server.core.stats[0] == 1
        assert len(manager.machine.in_progress_ids()) == 1
