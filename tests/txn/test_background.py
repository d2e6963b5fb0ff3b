"""The manager's own threads: timeouts and periodic snapshots, with a fake clock."""

from __future__ import annotations

import dataclasses
import time

from tests.txn.harness import SYSTEM_CONFIG, in_process_system


def eventually(check, timeout_s: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_expiry_thread_invalidates_timed_out_transactions() -> None:
    config = dataclasses.replace(SYSTEM_CONFIG, default_timeout_s=1, cleanup_interval_s=0.02)
    with in_process_system(config) as s:
        tx = s.manager.start_short()
        time.sleep(0.1)
        assert s.manager.invalid_size() == 0
        s.clock.advance(1_500)
        assert eventually(lambda: s.manager.invalid_size() == 1)
        assert s.manager.get_snapshot().invalid == (tx.transaction_id,)


def test_snapshot_thread_writes_snapshots_and_rolls_the_log() -> None:
    config = dataclasses.replace(SYSTEM_CONFIG, snapshot_interval_s=0.02, snapshot_retain=3)
    with in_process_system(config) as s:
        first = s.storage.list_snapshots()
        for _ in range(5):
            s.manager.start_short()
            s.clock.advance(5)
            time.sleep(0.03)
        assert eventually(lambda: len(s.storage.list_snapshots()) == 3)
        assert max(s.storage.list_snapshots()) > max(first)
        assert max(s.storage.list_logs()) >= max(s.storage.list_snapshots()) - 5
