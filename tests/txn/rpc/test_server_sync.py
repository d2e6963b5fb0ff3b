"""The Thrift server with its log on local files, synced by the helper process (the
default) and on the event loop itself: every answered commit survives a restart, and a
dead helper fails the log instead of letting an unsynced call be answered."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from txn.config import ServerConfig, TxConfig
from txn.errors import TxError
from txn.manager import ManagerState, TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.client import ThriftTxClient
from txn.rpc.retry import RetryNTimes
from txn.rpc.server import ServerThread, ThriftServer

CONFIG = TxConfig(cleanup_interval_s=0, snapshot_interval_s=0)


def new_manager(root: Path) -> TransactionManager:
    manager = TransactionManager(CONFIG, TransactionStateStore(LocalDirStorage(root)))
    manager.start()
    return manager


@contextmanager
def serving(manager: TransactionManager, helper: bool) -> Iterator[ThriftServer]:
    server = ThriftServer(manager, ServerConfig(port=0, sync_helper=helper))
    thread = ServerThread(server)
    thread.start()
    try:
        yield server
    finally:
        thread.stop()


@pytest.mark.parametrize("helper", [True, False], ids=["helper", "on-loop"])
def test_every_answered_commit_survives_a_restart(tmp_path: Path, helper: bool) -> None:
    manager = new_manager(tmp_path)
    committed: list[int] = []
    lock = threading.Lock()
    with serving(manager, helper) as server:
        assert (server._helper is not None) is helper

        def client_loop(i: int) -> None:
            client = ThriftTxClient(server.address, retry=RetryNTimes(1), timeout_s=10)
            try:
                for n in range(40):
                    tx = client.start_short()
                    client.can_commit_or_throw(tx, [b"k%d-%d" % (i, n)])
                    client.commit_or_throw(tx)
                    with lock:
                        committed.append(tx.transaction_id)
            finally:
                client.close()

        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert len(committed) == 8 * 40
    # No clean stop: recover from the log alone, as after a crash.
    manager._wal.close()  # type: ignore[union-attr]  # release the files as a dead process would
    manager._store.close()  # type: ignore[union-attr]
    recovered = new_manager(tmp_path)
    try:
        snapshot = recovered.get_snapshot()
        assert snapshot.read_pointer >= max(committed)
        assert not set(committed) & set(snapshot.invalid)
        assert not set(committed) & set(snapshot.in_progress)
        assert recovered.start_short().transaction_id > max(committed)
    finally:
        recovered.stop()


def test_a_dead_helper_fails_the_log_and_nothing_more_is_answered(tmp_path: Path) -> None:
    manager = new_manager(tmp_path)
    with serving(manager, helper=True) as server:
        client = ThriftTxClient(server.address, retry=RetryNTimes(1), timeout_s=10)
        try:
            client.start_short()  # served with the helper alive
            assert server._helper is not None
            os.kill(server._helper._proc.pid, signal.SIGKILL)
            server._helper._proc.wait(10)
            # Idle, the loop notices the end of the helper's socket and stops watching it
            # (an unwatched EOF would wake the loop forever).
            deadline = time.monotonic() + 10
            while server._helper_failure is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server._helper_failure is not None
            with pytest.raises(TxError):
                client.start_short()
            assert manager.state is ManagerState.FAILED
        finally:
            client.close()
    manager.stop()  # no final snapshot over a failed log, and no hang
    assert manager.state is ManagerState.STOPPED
