"""Leases on jobs' transactions (``tms.spark.lease``) against the real transaction
server with its timeout thread running: renewed past their timeout while the holder
lives, invalidated as soon as it dies, left to time out once released. The holder is a
real process the test starts and kills."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.servers import Stack, running_stack
from tms.spark.lease import Keeper, Lease, LeaseRegistry, holder_alive, process_start
from txn.config import TxConfig
from txn.errors import TransactionNotInProgressError
from txn.transaction import Transaction

TIMEOUT_S = 4  # renewed every 0.2 s: a loaded machine may stall a step for a second or two


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    config = TxConfig(cleanup_interval_s=0.2, snapshot_interval_s=0)
    with running_stack(tmp_path / "stack", config) as running:
        yield running


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def keeper(tmp_path: Path) -> Iterator[Keeper]:
    """A keeper driven by the test (``step``), over a registry that starts no process."""
    running = Keeper(LeaseRegistry(tmp_path / "leases", spawn=lambda _d: None))
    yield running
    running.close()


def lease(stack: Stack, tx_id: int, proc: subprocess.Popen[bytes]) -> Lease:
    return Lease(tx_id, stack.tx_address, TIMEOUT_S, proc.pid, process_start(proc.pid))


def held(
    stack: Stack, keeper: Keeper, holder: subprocess.Popen[bytes], timeout_s: int
) -> Transaction:
    """A short transaction held for ``holder``."""
    tx = stack.tx.start_short(timeout_s)
    keeper.registry.hold(lease(stack, tx.transaction_id, holder))
    return tx


def eventually(check: Callable[[], bool], deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, "not within the deadline"
        time.sleep(0.1)


def invalid(stack: Stack, tx_id: int) -> bool:
    probe = stack.tx.start_short()
    stack.tx.abort(probe)
    return probe.is_invalid(tx_id)


def test_renewed_past_its_timeout_while_the_holder_lives(
    stack: Stack, holder: subprocess.Popen[bytes], keeper: Keeper
) -> None:
    tx = held(stack, keeper, holder, TIMEOUT_S)
    # Given two timeouts' worth of time with the keeper looking every 0.2 s
    end = time.monotonic() + 2 * TIMEOUT_S
    while time.monotonic() < end:
        assert keeper.step() == 1
        time.sleep(0.2)
    # Then the transaction is still in progress: it takes a checkpoint and commits
    stack.tx.commit_or_throw(stack.tx.checkpoint(tx))
    keeper.step()
    assert keeper.registry.leases() == []  # no longer in progress: forgotten


def test_invalidated_at_once_when_the_holder_dies(
    stack: Stack, holder: subprocess.Popen[bytes], keeper: Keeper
) -> None:
    tx_id = held(stack, keeper, holder, 600).transaction_id  # only the keeper ends it soon
    assert keeper.step() == 1
    holder.kill()
    holder.wait()
    assert not holder_alive(holder.pid, process_start(holder.pid))
    assert keeper.step() == 0
    assert invalid(stack, tx_id)
    assert keeper.registry.leases() == []


def test_a_released_lease_times_out(
    stack: Stack, holder: subprocess.Popen[bytes], keeper: Keeper
) -> None:
    tx_id = held(stack, keeper, holder, TIMEOUT_S).transaction_id
    keeper.step()
    keeper.registry.release(tx_id)
    assert keeper.step() == 0
    eventually(lambda: invalid(stack, tx_id))
    with pytest.raises(TransactionNotInProgressError):
        stack.tx.extend_timeout(tx_id, TIMEOUT_S)


def test_the_keeper_process_starts_once_and_exits_when_idle(
    stack: Stack, holder: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    directory = tmp_path / "leases"

    def spawn(d: Path) -> None:
        args = ["--dir", str(d), "--tick-s", "0.2", "--idle-s", "1"]
        started.append(subprocess.Popen([sys.executable, "-m", "tms.spark.lease", *args]))

    registry = LeaseRegistry(directory, spawn=spawn)
    txs = [stack.tx.start_short(TIMEOUT_S) for _ in range(3)]
    try:
        registry.hold(lease(stack, txs[0].transaction_id, holder))
        eventually((directory / "keeper.log").exists)  # the keeper is up
        for tx in txs[1:]:
            registry.hold(lease(stack, tx.transaction_id, holder))
        time.sleep(2 * TIMEOUT_S)
        for tx in txs:
            stack.tx.checkpoint(tx)  # still in progress, all three
        assert len(started) <= 2 and started[0].poll() is None  # one keeper runs (the lock)
        for tx in txs:
            registry.release(tx.transaction_id)
        for proc in started:
            proc.wait(timeout=60)  # idle: it exits
        for tx in txs:
            eventually(lambda tx=tx: invalid(stack, tx.transaction_id))
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
