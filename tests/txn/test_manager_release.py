"""A manager that was stopped and dropped releases its log and the log's descriptors: the
log's listener must not keep the manager (and so the log) alive."""

from __future__ import annotations

import gc
import os

from txms_common.clock import SYSTEM_CLOCK
from txn.config import TxConfig
from txn.manager import TransactionManager
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _cycle_a_manager() -> None:
    manager = TransactionManager(TxConfig(), TransactionStateStore(MemoryStorage()), SYSTEM_CLOCK)
    manager.start()
    manager.start_short()
    manager.stop()


def test_stopped_managers_release_their_logs() -> None:
    _cycle_a_manager()  # first use: lazily made pools, modules
    gc.collect()
    before = _open_fds()
    for _ in range(20):
        _cycle_a_manager()
    gc.collect()
    assert _open_fds() - before < 5, "each manager left descriptors open"
