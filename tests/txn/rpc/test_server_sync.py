"""The Thrift server with its log on local files, synced by helper processes (the
default), on the event loop itself, or both by batch size: every answered commit survives
a restart; dead helpers are replaced by syncing on the loop; a failed sync fails the log
and nothing more is answered; pipelined syncs release replies in write order only."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from txms_common.retry import RetryNTimes
from txn.config import ServerConfig, TxConfig
from txn.engine import resolve
from txn.errors import TxError, TxStorageError
from txn.manager import ManagerState, TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.client import ThriftTxClient
from txn.rpc.server import ServerThread, ThriftServer

CONFIG = TxConfig(cleanup_interval_s=0, snapshot_interval_s=0)


def new_manager(root: Path) -> TransactionManager:
    # The Python engine's group commit (txn.rpc.group_commit), whichever the suite runs on:
    # the native engine syncs on its C loop, with no helper process.
    manager = TransactionManager(
        CONFIG, TransactionStateStore(LocalDirStorage(root)), engine=resolve("python")
    )
    manager.start()
    return manager


@contextmanager
def serving(
    manager: TransactionManager,
    helper: bool,
    min_edits: int = 8,
    helpers: int = 2,
    commit_delay_us: int = 0,
) -> Iterator[ThriftServer]:
    config = ServerConfig(
        port=0,
        sync_helper=helper,
        sync_helper_min_edits=min_edits,
        sync_helpers=helpers,
        commit_delay_us=commit_delay_us,
    )
    server = ThriftServer(manager, config)
    thread = ServerThread(server)
    thread.start()
    try:
        yield server
    finally:
        thread.stop()


def connect(server: ThriftServer) -> ThriftTxClient:
    """A client that does not retry: a call the server never answers is an error."""
    return ThriftTxClient(server.address, retry=RetryNTimes(1), timeout_s=10)


def eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.parametrize(
    ("helper", "min_edits", "helpers"),
    [(True, 0, 3), (True, 0, 1), (True, 2, 2), (False, 8, 1)],
    ids=["helpers", "one-helper", "mixed", "on-loop"],
)
def test_every_answered_commit_survives_a_restart(
    tmp_path: Path, helper: bool, min_edits: int, helpers: int
) -> None:
    manager = new_manager(tmp_path)
    committed: list[int] = []
    lock = threading.Lock()
    with serving(manager, helper, min_edits, helpers) as server:
        assert server.sync_helpers == (helpers if helper else 0)

        def client_loop(i: int) -> None:
            client = connect(server)
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
    manager.log.close()  # release the files as a dead process would
    assert manager.store is not None
    manager.store.close()
    recovered = new_manager(tmp_path)
    try:
        snapshot = recovered.get_snapshot()
        assert snapshot.read_pointer >= max(committed)
        assert not set(committed) & set(snapshot.invalid)
        assert not set(committed) & set(snapshot.in_progress)
        assert recovered.start_short().transaction_id > max(committed)
    finally:
        recovered.stop()


def test_dead_helpers_are_replaced_by_syncing_on_the_loop(tmp_path: Path) -> None:
    manager = new_manager(tmp_path)
    with serving(manager, helper=True, min_edits=0, helpers=2) as server:
        client = connect(server)
        try:
            client.commit_or_throw(client.start_short())  # through a helper
            first, second = server.group_commit.idle_helpers
            os.kill(first._proc.pid, signal.SIGKILL)
            first._proc.wait(10)
            # Idle, the loop notices the end of the helper's socket, stops watching it
            # (an unwatched end-of-file would wake the loop forever) and goes on with
            # the other one.
            assert eventually(lambda: server.sync_helpers == 1)
            client.commit_or_throw(client.start_short())
            os.kill(second._proc.pid, signal.SIGKILL)
            second._proc.wait(10)
            assert eventually(lambda: server.sync_helpers == 0)  # now the loop syncs
            tx = client.start_short()
            client.can_commit_or_throw(tx, [b"after"])
            client.commit_or_throw(tx)
            assert manager.state is ManagerState.RUNNING
        finally:
            client.close()
    manager.stop()
    recovered = new_manager(tmp_path)
    try:
        assert recovered.get_snapshot().read_pointer >= tx.transaction_id
    finally:
        recovered.stop()


def fail_syncs(helper: Any) -> None:
    """Fault injection: ``helper`` still syncs, but answers EIO from ``fdatasync``."""
    real_result = helper.result

    def failing() -> TxStorageError:
        outcome = real_result()
        return outcome if outcome is not None else TxStorageError("injected EIO")

    helper.result = failing


def test_a_failed_sync_fails_the_log_and_nothing_more_is_answered(tmp_path: Path) -> None:
    manager = new_manager(tmp_path)
    with serving(manager, helper=True, min_edits=0, helpers=1) as server:
        client = connect(server)
        try:
            client.start_short()
            (helper,) = server.group_commit.idle_helpers
            fail_syncs(helper)
            with pytest.raises(TxError):
                client.start_short()
            assert manager.state is ManagerState.FAILED
        finally:
            client.close()
    manager.stop()  # no final snapshot over a failed log, and no hang
    assert manager.state is ManagerState.STOPPED


class GatedHelper:
    """Fault injection: a sync helper that syncs for real but answers only when the test
    opens the gate, to hold a flush in flight while more calls arrive."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self.requested: list[int] = []

    def fileno(self) -> int:
        return self._read

    def request(self, fd: int) -> None:
        self.requested.append(fd)

    def answer(self) -> None:
        os.fdatasync(self.requested[-1])
        os.write(self._write, b"K")

    def result(self) -> TxStorageError | None:
        os.read(self._read, 1)
        return None

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


def _gate(server: ThriftServer, count: int) -> list[GatedHelper]:
    """Replace the server's helpers by ``count`` gated ones (on its loop, before use)."""
    gated = [GatedHelper() for _ in range(count)]
    loop = server.group_commit.loop
    assert loop is not None

    def swap() -> None:
        server.group_commit.replace_helpers(gated)  # type: ignore[arg-type]  # duck-typed fake

    done = threading.Event()
    loop.call_soon_threadsafe(lambda: (swap(), done.set()))
    assert done.wait(10)
    return gated


def _start_in_thread(client: ThriftTxClient, answered: list[int | TxError]) -> threading.Thread:
    """``start_short`` on a thread; its id (or error) goes to ``answered``."""

    def run() -> None:
        try:
            answered.append(client.start_short().transaction_id)
        except TxError as exc:
            answered.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_calls_queued_behind_a_helper_flush_are_answered_when_synced_on_the_loop(
    tmp_path: Path,
) -> None:
    # One helper, its flush in flight; a call arrives meanwhile; when the helper answers,
    # that call's batch is too small for the helper and is synced on the loop: its reply
    # must go out then, though no other call comes to wake the loop.
    manager = new_manager(tmp_path)
    with serving(manager, helper=True, min_edits=1, helpers=1) as server:
        (gated,) = _gate(server, 1)
        first = connect(server)
        second = connect(server)
        answered: list[int | TxError] = []
        try:
            a = _start_in_thread(first, answered)
            assert eventually(lambda: bool(gated.requested)), "the flush did not reach the helper"
            gc = server.group_commit
            gc.config = dataclasses.replace(gc.config, sync_helper_min_edits=2)
            b = _start_in_thread(second, answered)
            assert eventually(lambda: len(server.waiting) == 2), "the second call did not arrive"
            gated.answer()
            a.join(15)
            b.join(15)
            assert len(answered) == 2
            assert all(isinstance(x, int) for x in answered)
            assert len(gated.requested) == 1  # the second batch was synced on the loop
        finally:
            first.close()
            second.close()


@pytest.mark.parametrize("later_fails", [False, True], ids=["in-order", "earlier-fails"])
def test_pipelined_syncs_release_replies_in_write_order(tmp_path: Path, later_fails: bool) -> None:
    # Two helpers: the first call's batch is syncing with one when the second call's
    # batch goes to the other. The later sync finishing first releases nothing; the
    # earlier one's success releases both, its failure neither (the log fails).
    manager = new_manager(tmp_path)
    with serving(manager, helper=True, min_edits=1, helpers=2) as server:
        one, two = _gate(server, 2)
        first = connect(server)
        second = connect(server)
        answered: list[int | TxError] = []
        try:
            a = _start_in_thread(first, answered)
            assert eventually(lambda: bool(one.requested)), "the first flush did not start"
            b = _start_in_thread(second, answered)
            assert eventually(lambda: bool(two.requested)), "the second flush did not start"
            two.answer()
            time.sleep(0.2)
            assert answered == []  # durable only once the earlier flush is too
            if later_fails:
                fail_syncs(one)
            one.answer()
            a.join(15)
            b.join(15)
            assert len(answered) == 2
            if later_fails:  # neither answered OK: the connections were dropped
                assert all(isinstance(x, TxError) for x in answered)
                assert manager.state is ManagerState.FAILED
            else:
                assert all(isinstance(x, int) for x in answered)
        finally:
            first.close()
            second.close()


DELAY_S = 3600.0
"""Longer than any test: a call held back by the delay is never answered in time, so the
checks below are about who waits, not about how long anything took."""


def _age_answers(server: ThriftServer, by_s: float) -> None:
    """Make every connection's last answer ``by_s`` older, on the server's loop (the
    delay logic reads the monotonic clock: this is how the test lets time pass)."""
    done = threading.Event()
    loop = server.group_commit.loop
    assert loop is not None
    loop.call_soon_threadsafe(lambda: (server.group_commit.age_answers(by_s), done.set()))
    assert done.wait(10)


def test_commit_delay_waits_for_recently_answered_connections_only(tmp_path: Path) -> None:
    manager = new_manager(tmp_path)
    stats = manager.log.stats
    with serving(manager, helper=False, commit_delay_us=100_000) as server:
        server.group_commit.delay_s = DELAY_S
        a, b = connect(server), connect(server)  # a call not answered in 10 s fails
        try:
            # A lone client is never held back: its own answer does not count.
            for _ in range(5):
                a.start_short()
            # A was just answered and stays quiet: B's call is parked, waiting for A.
            answered: list[int | TxError] = []
            parked = _start_in_thread(b, answered)
            assert eventually(lambda: len(server.waiting) == 1)
            assert answered == []
            # A calls meanwhile: one flush answers both.
            syncs = stats.syncs
            a.start_short()
            parked.join(10)
            assert len(answered) == 1 and isinstance(answered[0], int)
            assert stats.syncs == syncs + 1
            # Both were answered, then quiet for a whole delay: not waited for.
            _age_answers(server, DELAY_S)
            b.start_short()
        finally:
            a.close()
            b.close()
    manager.stop()
