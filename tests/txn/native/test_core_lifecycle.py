"""The C types' lives as Python objects: a cycle through a C log or server is collected
like any other, and one created without ``__init__`` (``T.__new__(T)``) frees without
touching a descriptor it never opened."""

from __future__ import annotations

import asyncio
import gc
import os
import weakref
from collections.abc import Iterator

import pytest

from tests.fakes import FakeClock
from tests.txn.harness import SYSTEM_CONFIG
from txn import native
from txn.config import ServerConfig
from txn.engine import resolve
from txn.errors import TxStorageError
from txn.manager import TransactionManager
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built")

if native.AVAILABLE:
    from txn.native._core import Log, Machine, Server, StateLock
    from txn.native.server import NativeThriftServer


class LogOwner:
    """Holds a C log that holds one of its methods: a cycle through the log."""

    def __init__(self) -> None:
        self.log = Log(TxStorageError, notify=True)
        self.log.add_listener(self.on_flush)
        self.log.add_listener(self.on_flush, failures_only=True)

    def on_flush(self, ticket: int, failure: object) -> None:
        pass


def collected(ref: weakref.ref[object]) -> bool:
    gc.collect()
    return ref() is None


def test_a_cycle_through_a_native_log_is_collected() -> None:
    owner = LogOwner()
    ref: weakref.ref[object] = weakref.ref(owner)
    del owner
    assert collected(ref)


def test_a_cycle_through_a_native_server_is_collected() -> None:
    # Given a native server started and closed (its C server holds the Python server's
    # dispatcher, a bound method: a cycle)
    manager = TransactionManager(
        SYSTEM_CONFIG,
        TransactionStateStore(MemoryStorage()),
        FakeClock(),
        engine=resolve("native"),
    )
    manager.start()
    try:
        server = NativeThriftServer(manager, ServerConfig(port=0, commit_delay_us=0))
        asyncio.run(server.start())
        asyncio.run(server.close())
        assert server.core is not None
        ref: weakref.ref[object] = weakref.ref(server)
        # When the last reference goes, then the cycle is collected
        del server
        assert collected(ref)
    finally:
        manager.stop()


@pytest.fixture
def fd0_is_a_pipe() -> Iterator[int]:
    """Descriptor 0 is a pipe's read end for the test (restored after): what a type that
    took a zeroed field for a descriptor would close."""
    saved = os.dup(0)
    r, w = os.pipe()
    os.dup2(r, 0)
    os.close(r)
    try:
        yield w
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(w)


@pytest.mark.parametrize("kind", ["Log", "Server", "Machine", "StateLock"])
def test_an_object_never_initialized_closes_no_descriptor(fd0_is_a_pipe: int, kind: str) -> None:
    types: dict[str, type] = {
        "Log": Log,
        "Server": Server,
        "Machine": Machine,
        "StateLock": StateLock,
    }
    made = types[kind].__new__(types[kind])
    del made
    gc.collect()
    # Then descriptor 0 is still the pipe: what is written reads back through it
    os.write(fd0_is_a_pipe, b"x")
    assert os.read(0, 1) == b"x"


def test_a_server_whose_init_failed_refuses_a_second_init() -> None:
    r, w = os.pipe()
    os.close(w)
    server = Server.__new__(Server)
    args = (r, Machine(), Log(TxStorageError), StateLock(), None, print, print, {})
    with pytest.raises(KeyError):  # no settings: fails after taking its arguments
        server.__init__(*args)  # type: ignore[misc]
    with pytest.raises(RuntimeError, match="twice"):
        server.__init__(*args)  # type: ignore[misc]
