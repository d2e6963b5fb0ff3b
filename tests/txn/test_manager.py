"""Tephra's TransactionManagerTest, ClientIdTest and state-storage scenarios, on the
manager directly (memory storage, fake clock)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.fakes import FakeClock
from tests.txn.harness import SYSTEM_CONFIG, TxSystem, in_process_system, restarted
from txn.config import ClientIdRetention
from txn.errors import (
    InvalidTruncateTimeError,
    ManagerNotRunningError,
    SnapshotUnavailableError,
    TransactionConflictError,
    TransactionNotInProgressError,
)
from txn.manager import ManagerState, TransactionManager
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_record
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.state import InProgressType
from txn.transaction import TransactionType

TIMEOUTS = dataclasses.replace(SYSTEM_CONFIG, default_timeout_s=2, long_timeout_s=2)


@pytest.fixture
def system() -> Iterator[TxSystem]:
    with in_process_system() as s:
        yield s


def test_transaction_cleanup() -> None:
    with in_process_system(dataclasses.replace(SYSTEM_CONFIG, default_timeout_s=2)) as s:
        m, clock = s.manager, s.clock
        tx1, tx2 = m.start_short(), m.start_short()
        ltx1, ltx2 = m.start_long(), m.start_long()
        tx2c = m.checkpoint(tx2)
        for _ in range(10):
            tx = m.start_short()
            m.can_commit(tx.transaction_id, [b"k"])
            m.commit(tx.transaction_id, tx.write_pointer)
        assert m.get_snapshot().committed  # kept while tx1 runs

        clock.advance(5_000)
        assert sorted(m.expire_timed_out()) == [tx1.transaction_id, tx2.transaction_id]

        tx = m.start_short()
        assert tx.invalids == (tx1.transaction_id, tx2.transaction_id, tx2c.write_pointer)
        for v in (tx1.transaction_id, tx2.transaction_id, tx2c.write_pointer, ltx1.transaction_id):
            assert not tx.is_visible(v)
        m.commit(tx.transaction_id, tx.write_pointer)
        assert not m.get_snapshot().committed

        with pytest.raises(TransactionNotInProgressError, match="known to be invalid"):
            m.can_commit(tx1.transaction_id, [b"x"])
        m.abort(tx1)
        assert m.invalid_size() == 2
        m.abort(tx2c)
        assert m.invalid_size() == 0

        m.commit(ltx1.transaction_id, ltx1.write_pointer)
        m.abort(ltx2)
        assert m.get_snapshot().invalid == (ltx2.transaction_id,)
        assert m.excluded_size() == 1


def test_long_transaction_cleanup() -> None:
    with in_process_system(TIMEOUTS) as s:
        m = s.manager
        ltx = m.start_long()
        s.clock.advance(5_000)
        m.expire_timed_out()
        assert m.invalid_size() == 1
        with pytest.raises(TransactionNotInProgressError):
            m.can_commit(ltx.transaction_id, [b"x"])
        m.abort(ltx)
        assert m.invalid_size() == 1


def test_truncate_invalid_replays(system: TxSystem) -> None:
    m = system.manager
    tx1, tx2, tx3, tx4, tx5, tx6 = (
        m.start_long(),
        m.start_short(),
        m.start_long(),
        m.start_short(),
        m.start_long(),
        m.start_short(),
    )
    for tx in (tx1, tx2, tx5, tx6):
        assert m.invalidate(tx.transaction_id)
    ids = [tx.transaction_id for tx in (tx1, tx2, tx5, tx6)]
    assert m.get_snapshot().invalid == tuple(ids)
    assert m.truncate_invalid_tx([tx1.transaction_id, tx6.transaction_id])
    assert m.get_snapshot().invalid == (tx2.transaction_id, tx5.transaction_id)
    assert not m.truncate_invalid_tx([tx3.transaction_id, tx4.transaction_id])
    state = m.get_snapshot()
    second = restarted(system)
    assert second.get_snapshot() == state
    second.stop()


def test_truncate_invalid_before_time_replays(system: TxSystem) -> None:
    m, clock = system.manager, system.clock
    tx1, tx2 = m.start_long(), m.start_short()
    clock.advance()
    before_tx3 = clock.now_ms()
    tx3, tx4 = m.start_long(), m.start_short()
    clock.advance()
    before_tx5 = clock.now_ms()
    tx5, tx6 = m.start_long(), m.start_short()
    for tx in (tx1, tx2, tx5, tx6):
        m.invalidate(tx.transaction_id)
    assert m.truncate_invalid_tx_before(before_tx3)
    assert m.get_snapshot().invalid == (tx5.transaction_id, tx6.transaction_id)
    with pytest.raises(InvalidTruncateTimeError):
        m.truncate_invalid_tx_before(before_tx5)
    assert m.get_snapshot().invalid == (tx5.transaction_id, tx6.transaction_id)
    state = m.get_snapshot()
    second = restarted(system)
    assert second.get_snapshot() == state
    assert tx3.transaction_id in state.in_progress and tx4.transaction_id in state.in_progress
    second.stop()


@pytest.mark.parametrize("retention", list(ClientIdRetention))
def test_client_id_retention(retention: ClientIdRetention) -> None:
    config = dataclasses.replace(SYSTEM_CONFIG, retain_client_id=retention)
    with in_process_system(config) as s:
        m = s.manager
        tx1 = m.start_short(client_id="clientA")
        entry = m.get_snapshot().in_progress[tx1.transaction_id]
        assert entry.client_id == (None if retention is ClientIdRetention.OFF else "clientA")
        tx2 = m.start_short(client_id="clientB")
        m.can_commit(tx1.transaction_id, [b"2"])
        m.commit(tx1.transaction_id, tx1.write_pointer)
        expected_client = "clientA" if retention is ClientIdRetention.COMMITTED else None
        with pytest.raises(TransactionConflictError) as err:
            m.can_commit(tx2.transaction_id, [b"2"])
        assert (err.value.transaction_id, err.value.conflicting_key) == (tx2.transaction_id, "2")
        assert err.value.conflicting_client == expected_client
        # and at commit time, after a clean can_commit
        tx3 = m.start_short(client_id="clientC")
        tx4 = m.start_short(client_id="clientD")
        m.can_commit(tx4.transaction_id, [b"2"])
        m.can_commit(tx3.transaction_id, [b"2"])
        m.commit(tx3.transaction_id, tx3.write_pointer)
        with pytest.raises(TransactionConflictError) as err:
            m.commit(tx4.transaction_id, tx4.write_pointer)
        assert err.value.conflicting_client == (
            "clientC" if retention is ClientIdRetention.COMMITTED else None
        )


def test_change_keys_print_like_tephra(system: TxSystem) -> None:
    m = system.manager
    tx1, tx2 = m.start_short(), m.start_short()
    m.can_commit(tx1.transaction_id, [b"a\x00\xffZ"])
    m.commit(tx1.transaction_id, tx1.write_pointer)
    with pytest.raises(TransactionConflictError, match=r"a\\x00\\xFFZ"):
        m.can_commit(tx2.transaction_id, [b"a\x00\xffZ"])


def test_manager_persistence_across_clean_stop_and_crash() -> None:
    clock = FakeClock()
    storage = MemoryStorage()

    def manager() -> TransactionManager:
        m = TransactionManager(SYSTEM_CONFIG, TransactionStateStore(storage), clock)
        m.start()
        return m

    m = manager()
    tx0 = m.start_short()
    m.invalidate(tx0.transaction_id)
    tx1 = m.start_short()
    m.can_commit(tx1.transaction_id, [b"a"])
    m.commit(tx1.transaction_id, tx1.write_pointer)
    tx2 = m.start_short()
    m.can_commit(tx2.transaction_id, [b"b"])
    tx3 = m.start_short()
    state = m.get_snapshot()
    m.stop()  # final snapshot

    m = manager()
    assert m.get_snapshot() == state
    m.commit(tx2.transaction_id, tx2.write_pointer)  # committing set survived the restart
    tx4 = m.start_short()
    assert tx4.transaction_id > tx3.transaction_id
    with pytest.raises(TransactionConflictError):
        m.can_commit(tx3.transaction_id, [b"b"])
    tx5 = m.start_short()
    assert tx5.is_visible(tx1.transaction_id) and tx5.is_visible(tx2.transaction_id)
    assert not tx5.is_visible(tx0.transaction_id) and not tx5.is_visible(tx3.transaction_id)
    for tx in (tx3, tx4, tx5):
        m.abort(tx)
    after = m.start_short()
    assert after.in_progress == () and after.invalids == (tx0.transaction_id,)
    m.abort(after)

    for _ in range(50):
        m.start_short()
    crashed = m.get_snapshot()
    # crash: no stop(); a new manager replays snapshot + logs
    m2 = TransactionManager(SYSTEM_CONFIG, TransactionStateStore(storage), clock)
    m.log.close()  # release the log as a dead process would
    m2.start()
    assert m2.get_snapshot() == crashed
    assert m2.start_short().transaction_id > crashed.write_pointer
    m2.stop()


def test_committed_set_clearing_replays_identically(system: TxSystem) -> None:
    m = system.manager
    tx1 = m.start_short()
    m.can_commit(tx1.transaction_id, [b"a"])
    tx2 = m.start_short()
    m.can_commit(tx2.transaction_id, [b"b"])
    m.commit(tx1.transaction_id, tx1.write_pointer)
    tx3 = m.start_short()
    m.can_commit(tx3.transaction_id, [b"c"])
    m.commit(tx2.transaction_id, tx2.write_pointer)
    m.start_short()
    state = m.get_snapshot()
    second = restarted(system)
    assert second.get_snapshot() == state
    second.stop()


def test_long_transaction_edit_replay() -> None:
    storage = MemoryStorage()
    clock = FakeClock()
    wp = clock.now_ms() * 1_000_000
    edits = [
        TransactionEdit.started(wp + 1, wp, clock.now_ms() + 10_000, TransactionType.LONG),
        TransactionEdit.aborted(wp + 1, TransactionType.LONG, ()),
        TransactionEdit.started(wp + 2, wp, clock.now_ms() + 10_000, TransactionType.LONG),
        TransactionEdit.invalid(wp + 2),
        TransactionEdit.started(wp + 3, wp, clock.now_ms() + 10_000, TransactionType.LONG),
        TransactionEdit.invalid(wp + 3),
        TransactionEdit.aborted(wp + 3, TransactionType.LONG, ()),
    ]
    log = storage.create_log(1)
    log.write(b"".join(encode_record(i, e) for i, e in enumerate(edits)))
    m = TransactionManager(SYSTEM_CONFIG, TransactionStateStore(storage), clock)
    m.start()
    snap = m.get_snapshot()
    assert snap.invalid == (wp + 1, wp + 2, wp + 3)
    assert not snap.in_progress
    m.stop()


def test_v2_aborted_edits_without_type() -> None:
    """Tephra's testAbortEditBackwardsCompatibility: typeless ABORTED edits."""
    storage = MemoryStorage()
    clock = FakeClock()
    wp = clock.now_ms() * 1_000_000
    long_exp = wp // 1_000_000 + TIMEOUTS.long_timeout_s * 1000
    records = [
        TransactionEdit.started(wp + 1, wp, -1, TransactionType.LONG),  # legacy long
        TransactionEdit(state=TransactionEdit.aborted(0, None, None).state, write_pointer=wp + 1),
        TransactionEdit.started(wp + 2, wp, long_exp, TransactionType.SHORT),
        TransactionEdit.invalid(wp + 2),
        TransactionEdit(state=TransactionEdit.aborted(0, None, None).state, write_pointer=wp + 2),
    ]
    log = storage.create_log(1)
    log.write(b"".join(encode_record(i, e) for i, e in enumerate(records)))
    m = TransactionManager(TIMEOUTS, TransactionStateStore(storage), clock)
    m.start()
    assert m.get_snapshot().invalid == (wp + 1, wp + 2)
    m.stop()


def test_snapshot_codec_v4_scenario(system: TxSystem) -> None:
    m = system.manager
    ltx = m.start_long()
    ltx_c = m.checkpoint(ltx)
    others = [m.start_short() for _ in range(3)]
    for tx in reversed(others):
        m.invalidate(tx.transaction_id)
    snap = m.get_snapshot()
    assert snap.invalid == tuple(tx.transaction_id for tx in others)
    parent = snap.in_progress[ltx.transaction_id]
    assert parent.checkpoint_write_pointers == (ltx_c.write_pointer,)
    assert snap.in_progress[ltx_c.write_pointer].type is InProgressType.CHECKPOINT
    m.take_snapshot()
    second = restarted(system)
    assert second.get_snapshot() == snap
    second.can_commit(ltx_c.transaction_id, [])
    second.commit(ltx_c.transaction_id, ltx_c.write_pointer)
    assert not second.get_snapshot().in_progress
    second.stop()


def test_not_running_manager_refuses_calls() -> None:
    m = TransactionManager(SYSTEM_CONFIG)
    with pytest.raises(ManagerNotRunningError):
        m.start_short()
    assert m.status() == "NOTOK"
    with pytest.raises(SnapshotUnavailableError):
        m.get_snapshot()
    m.start()
    assert m.status() == "OK"
    m.stop()
    assert m.state is ManagerState.STOPPED
    with pytest.raises(ManagerNotRunningError):
        m.start_long()


def test_snapshot_rolls_the_log_and_retention_applies() -> None:
    config = dataclasses.replace(SYSTEM_CONFIG, snapshot_retain=2)
    with in_process_system(config) as s:
        for _ in range(4):
            s.manager.start_short()
            s.clock.advance(10)
            assert s.manager.take_snapshot()
        snaps, logs = s.storage.list_snapshots(), s.storage.list_logs()
        assert len(snaps) == 2
        assert min(logs) >= min(snaps)
        assert max(logs) == max(snaps)  # the current log starts at the newest snapshot


def test_state_watchers_see_every_transition_in_order() -> None:
    seen: list[ManagerState] = []
    manager = TransactionManager(SYSTEM_CONFIG, TransactionStateStore(MemoryStorage()), FakeClock())
    manager.watch_state(seen.append)  # the state now, then each transition
    manager.start()
    manager.stop()
    manager.unwatch_state(seen.append)
    manager.unwatch_state(seen.append)  # not watching: a no-op
    assert seen == [
        ManagerState.NEW,
        ManagerState.RUNNING,
        ManagerState.STOPPING,
        ManagerState.STOPPED,
    ]
