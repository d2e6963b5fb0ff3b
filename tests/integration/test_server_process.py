"""``txn serve`` as a process: clean shutdown on SIGTERM, and kill -9 under load."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.procs import ServerProcess
from txms_common.retry import RetryNTimes
from txn.errors import TxError
from txn.rpc.client import ThriftTxClient


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "state")
    yield proc
    proc.kill()


def test_sigterm_finishes_writes_a_snapshot_and_exits_zero(server: ServerProcess) -> None:
    address = server.start()
    with ThriftTxClient(address, retry=RetryNTimes(1)) as client:
        committed = client.start_short()
        client.can_commit_or_throw(committed, [b"k"])
        client.commit_or_throw(committed)
        open_tx = client.start_long()
        invalid = client.start_short()
        client.invalidate(invalid.transaction_id)
        before = client.get_snapshot()
    snapshots_before = set(server.data_dir.glob("snapshot.*"))

    assert server.terminate() == 0
    assert set(server.data_dir.glob("snapshot.*")) - snapshots_before  # a final snapshot

    address = server.start()
    with ThriftTxClient(address, retry=RetryNTimes(1)) as client:
        assert client.get_snapshot()[1:] != b""
        tx = client.start_short()
        assert tx.is_visible(committed.transaction_id)
        assert tx.is_in_progress(open_tx.transaction_id)
        assert invalid.transaction_id in tx.invalids
        assert tx.transaction_id > open_tx.transaction_id
        assert len(client.get_snapshot()) >= len(before)
    assert server.terminate() == 0


class Load:
    """Client threads running transactions and recording what the server acknowledged."""

    def __init__(self, address: tuple[str, int], threads: int = 4) -> None:
        self.address = address
        self.committed: set[int] = set()
        self.invalidated: set[int] = set()
        self.open: set[int] = set()
        self.max_id = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)
        ]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def _run(self, n: int) -> None:
        client = ThriftTxClient(self.address, retry=RetryNTimes(1), timeout_s=5)
        i = 0
        try:
            while not self.stop.is_set():
                i += 1
                tx = client.start_short()
                with self.lock:
                    self.max_id = max(self.max_id, tx.transaction_id)
                if i % 7 == 0:
                    with self.lock:
                        self.open.add(tx.transaction_id)
                    continue
                if i % 5 == 0:
                    if client.invalidate(tx.transaction_id):
                        with self.lock:
                            self.invalidated.add(tx.transaction_id)
                    continue
                client.can_commit_or_throw(tx, [f"{n}:{i}".encode()])
                client.commit_or_throw(tx)
                with self.lock:
                    self.committed.add(tx.transaction_id)
        except TxError:
            pass  # the server died under us
        finally:
            client.close()


def test_kill_9_under_load_loses_nothing_acknowledged(server: ServerProcess) -> None:
    rng = random.Random(20261122)
    committed: set[int] = set()
    invalidated: set[int] = set()
    still_open: set[int] = set()
    max_id = 0
    for _round in range(4):
        address = server.start()
        with ThriftTxClient(address, retry=RetryNTimes(1)) as client:
            # Given the state left by every earlier crash
            tx = client.start_short()
            assert tx.transaction_id > max_id, "ids went backwards"
            lost = [c for c in committed if not tx.is_visible(c)]
            assert not lost, f"committed transactions lost: {lost[:5]}"
            assert invalidated <= set(tx.invalids), "invalid list lost entries"
            assert still_open <= set(tx.in_progress), "in-progress transactions lost"
            client.abort(tx)
        # When a new load runs and the server is killed at a random moment
        with Load(address) as load:
            time.sleep(rng.uniform(0.5, 1.2))
            server.kill()
        committed |= load.committed
        invalidated |= load.invalidated
        still_open |= load.open
        max_id = max(max_id, load.max_id)
        assert load.committed, "the load made no progress"
    server.start()
