"""``write_pointer_state``: the immediate answer (for refusing writes) may show finished a
commit whose log edit is not yet durable; the durable one (for readers) waits until it
is, so it never shows a commit that a crash could lose. Checked in process on both
engines (a log whose sync is held) and over Thrift (a sync helper stopped with SIGSTOP).
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.txn.faulty_storage import FaultyStorage
from tests.txn.rpc.test_server_sync import connect, eventually, new_manager, serving
from txn import native
from txn.engine import resolve
from txn.manager import TransactionManager
from txn.persist.store import TransactionStateStore
from txn.state import WritePointerState

ENGINES = [
    "python",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built"),
    ),
]
WAIT_S = 0.5  # how long an answer that must wait is given to (wrongly) arrive


@pytest.mark.parametrize("engine", ENGINES)
def test_the_durable_state_waits_for_a_commit_to_be_durable(engine: str) -> None:
    storage = FaultyStorage()
    manager = TransactionManager(store=TransactionStateStore(storage), engine=resolve(engine))
    manager.start()
    pool = ThreadPoolExecutor(2)
    try:
        tx = manager.start_short()
        wp = [tx.write_pointer]
        assert manager.write_pointer_state(wp, durable=True).in_progress == {tx.write_pointer}
        storage.gate.clear()
        storage.holding.clear()
        commit = pool.submit(manager.commit, tx.transaction_id, tx.write_pointer)
        assert storage.holding.wait(10)  # applied in memory, its edit not yet durable
        # The writer's answer: at once, and the commit already shows (errs to refusing).
        assert tx.write_pointer not in manager.write_pointer_state(wp).in_progress
        # The reader's answer waits for the sync.
        reader: Future[WritePointerState] = pool.submit(
            manager.write_pointer_state, wp, durable=True
        )
        with pytest.raises(TimeoutError):
            reader.result(WAIT_S)
        assert not commit.done()
        storage.gate.set()
        commit.result(10)
        state = reader.result(10)
        assert tx.write_pointer not in state.in_progress
        assert tx.write_pointer not in state.invalid
    finally:
        storage.gate.set()
        pool.shutdown()
        manager.stop()


def test_over_thrift_the_durable_state_waits_for_a_stopped_sync(tmp_path: Path) -> None:
    manager = new_manager(tmp_path)
    pool = ThreadPoolExecutor(2)
    with serving(manager, helper=True, min_edits=0, helpers=1) as server:
        committer, asker, reader = connect(server), connect(server), connect(server)
        (helper,) = server.group_commit.idle_helpers
        pid = helper._proc.pid
        try:
            tx = committer.start_short()
            wp = [tx.write_pointer]
            assert reader.write_pointer_state(wp, durable=True).in_progress == {tx.write_pointer}
            os.kill(pid, signal.SIGSTOP)
            commit = pool.submit(committer.commit_or_throw, tx)
            # The server applied it in memory: the immediate answer shows it at once.
            assert eventually(
                lambda: tx.write_pointer not in asker.write_pointer_state(wp).in_progress
            )
            answer: Future[WritePointerState] = pool.submit(
                reader.write_pointer_state, wp, durable=True
            )
            with pytest.raises(TimeoutError):
                answer.result(WAIT_S)
            assert not commit.done()
            os.kill(pid, signal.SIGCONT)
            commit.result(10)
            state = answer.result(10)
            assert tx.write_pointer not in state.in_progress
            assert tx.write_pointer not in state.invalid
        finally:
            os.kill(pid, signal.SIGCONT)
            pool.shutdown()
            for client in (committer, asker, reader):
                client.close()
    manager.stop()
