"""Recovery of a manager whose state was damaged on disk: one bad byte in the log or in a
snapshot must never be read as something else. Only a torn last batch may be dropped;
any other damage stops the start, naming the file and offset."""

from __future__ import annotations

import pytest

from tests.fakes import FakeClock
from tests.txn.harness import SYSTEM_CONFIG
from txn.errors import CorruptStateError
from txn.manager import TransactionManager
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore


def crashed_manager(storage: MemoryStorage, clock: FakeClock) -> tuple[int, list[int]]:
    """A manager that committed transactions one synced batch at a time, invalidated one,
    and crashed (no final snapshot). Returns its log's timestamp and the log sizes after
    each batch."""
    manager = TransactionManager(SYSTEM_CONFIG, TransactionStateStore(storage), clock)
    manager.start()
    (log_ts,) = storage.list_logs()
    sizes = []
    for i in range(4):
        tx = manager.start_short()
        manager.can_commit(tx.transaction_id, [b"key-%d" % i])
        manager.commit(tx.transaction_id, tx.write_pointer)
        clock.advance()
        sizes.append(len(storage.logs[log_ts]))
    bad = manager.start_short()
    sizes.append(len(storage.logs[log_ts]))
    manager.invalidate(bad.transaction_id)
    sizes.append(len(storage.logs[log_ts]))
    return log_ts, sizes


def restart(storage: MemoryStorage, clock: FakeClock) -> TransactionManager:
    manager = TransactionManager(SYSTEM_CONFIG, TransactionStateStore(storage), clock)
    manager.start()
    return manager


def test_a_corrupt_byte_in_the_log_never_drops_the_rest_silently() -> None:
    clock = FakeClock()
    original = MemoryStorage()
    log_ts, sizes = crashed_manager(original, clock)
    log = bytes(original.logs[log_ts])
    # For every byte of the log before its last batch (the invalidation)
    for pos in range(sizes[-2]):
        storage = MemoryStorage()
        storage.snapshots = dict(original.snapshots)
        damaged = bytearray(log)
        damaged[pos] ^= 0x5A
        storage.logs[log_ts] = damaged
        # the restart refuses, naming the log and an offset
        with pytest.raises(CorruptStateError, match=rf"txlog\.{log_ts} .*corrupt at byte \d+"):
            restart(storage, clock).stop()


def test_a_torn_last_batch_loses_only_that_batch() -> None:
    clock = FakeClock()
    original = MemoryStorage()
    log_ts, sizes = crashed_manager(original, clock)
    log = bytes(original.logs[log_ts])
    for cut in range(sizes[-2], sizes[-1]):
        storage = MemoryStorage()
        storage.snapshots = dict(original.snapshots)
        storage.logs[log_ts] = bytearray(log[:cut])
        manager = restart(storage, clock)
        tx = manager.start_short()
        assert not tx.invalids  # the invalidation was the torn batch
        assert len(tx.in_progress) == 1  # the transaction it invalidated is still running
        assert manager.get_snapshot().read_pointer > 0
        manager.stop()
        assert bytes(storage.logs[log_ts]) == log[: sizes[-2]]


def test_a_corrupt_snapshot_is_never_half_read() -> None:
    clock = FakeClock()
    storage = MemoryStorage()
    manager = restart(storage, clock)
    for _ in range(3):
        manager.invalidate(manager.start_short().transaction_id)
    clock.advance()
    manager.stop()  # the final snapshot holds the three invalid ids
    (first, last) = storage.list_snapshots()
    expected = restart_state(storage, clock)
    data = storage.snapshots[last]
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0x01
        storage.snapshots[last] = bytes(damaged)
        # Either the damaged snapshot is detected and the older one (with the logs
        # since it) gives the same state, or it is refused: never a different state
        assert restart_state(storage, clock) == expected
    storage.snapshots[last] = data
    del storage.snapshots[first]
    storage.snapshots[last] = data[:-1]
    with pytest.raises(CorruptStateError, match="no snapshot"):
        restart(storage, clock)


def restart_state(storage: MemoryStorage, clock: FakeClock) -> tuple[int, tuple[int, ...]]:
    copy = MemoryStorage()
    copy.snapshots = dict(storage.snapshots)
    copy.logs = {ts: bytearray(data) for ts, data in storage.logs.items()}
    manager = restart(copy, clock)
    snapshot = manager.get_snapshot()
    manager.stop()
    return snapshot.read_pointer, snapshot.invalid
