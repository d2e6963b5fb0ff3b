"""The transaction manager against a small model, with restarts from snapshot + log.

The model keeps only what a user can observe: each transaction's status, its checkpoints,
declared and committed change sets, the read pointer and the invalid list. After every
step the manager's state must match the model; a restart (clean or crash) must recover
exactly the state before it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import psycopg
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.fakes import FakeClock
from txn.config import TxConfig
from txn.errors import (
    InvalidTruncateTimeError,
    TransactionConflictError,
    TransactionNotInProgressError,
    TransactionSizeError,
)
from txn.manager import TransactionManager
from txn.persist.memory import MemoryStorage
from txn.persist.postgres import PostgresStorage
from txn.persist.storage import StateStorage
from txn.persist.store import TransactionStateStore
from txn.transaction import Transaction, TransactionType

CONFIG = TxConfig(
    default_timeout_s=2,
    long_timeout_s=5,
    changeset_count_limit=2,
    cleanup_interval_s=0,
    snapshot_interval_s=0,
    snapshot_retain=2,
)
KEYS = st.frozensets(st.sampled_from([b"a", b"b", b"c"]), min_size=1, max_size=3)


@dataclass
class ModelTx:
    tx_id: int
    type: TransactionType
    expiration_ms: int
    status: str = "in_progress"  # in_progress | committed | aborted | invalid
    checkpoints: list[int] = field(default_factory=list)


class ManagerMachine(RuleBasedStateMachine):
    txs = Bundle("txs")

    @initialize()
    def setup(self) -> None:
        self.clock = FakeClock()
        self.storage = self._fresh_storage()
        self.manager = self._new_manager()
        # The model.
        self.model: dict[int, ModelTx] = {}
        self.handles: dict[int, Transaction] = {}  # what the client holds (after checkpoints)
        self.invalid: set[int] = set()
        self.committing: dict[int, frozenset[bytes]] = {}
        self.commits: list[tuple[int, frozenset[bytes]]] = []  # (commit pointer, changes)
        snap = self.manager.get_snapshot()
        self.read_pointer = snap.read_pointer
        self.last_wp = snap.write_pointer

    def _fresh_storage(self) -> StateStorage:
        return MemoryStorage()

    def _storage_after_restart(self) -> StateStorage:
        """What the restarted manager opens (the same memory, as after a reboot)."""
        return self.storage

    def _new_manager(self) -> TransactionManager:
        manager = TransactionManager(CONFIG, TransactionStateStore(self.storage), self.clock)
        manager.start()
        return manager

    def teardown(self) -> None:
        self.manager.stop()

    # -- model helpers ----------------------------------------------------------------

    def _next_wp(self) -> int:
        self.last_wp = max(self.last_wp + 1, self.clock.now_ms() * 1_000_000)
        return self.last_wp

    def _in_progress_ids(self) -> list[int]:
        ids = []
        for t in self.model.values():
            if t.status == "in_progress":
                ids.append(t.tx_id)
                ids.extend(t.checkpoints)
        return sorted(ids)

    def _conflicts(self, tx_id: int, changes: frozenset[bytes]) -> bool:
        return any(p > tx_id and c & changes for p, c in self.commits)

    def _invalidate(self, t: ModelTx) -> None:
        self.committing.pop(t.tx_id, None)
        t.status = "invalid"
        self.invalid.add(t.tx_id)
        self.invalid.update(t.checkpoints)
        if t.type is TransactionType.SHORT:
            self.read_pointer = max(self.read_pointer, t.tx_id)

    # -- rules ------------------------------------------------------------------------

    @rule(target=txs, long=st.booleans())
    def start(self, long: bool) -> int:
        tx = self.manager.start_long() if long else self.manager.start_short()
        expected_id = self._next_wp()
        assert tx.transaction_id == expected_id
        assert tx.read_pointer == self.read_pointer
        assert list(tx.in_progress) == self._in_progress_ids()
        assert list(tx.invalids) == sorted(self.invalid)
        timeout = CONFIG.long_timeout_s if long else CONFIG.default_timeout_s
        tx_type = TransactionType.LONG if long else TransactionType.SHORT
        self.model[tx.transaction_id] = ModelTx(
            tx.transaction_id, tx_type, self.clock.now_ms() + timeout * 1000
        )
        self.handles[tx.transaction_id] = tx
        return tx.transaction_id

    @rule(tx_id=txs, changes=KEYS)
    def can_commit(self, tx_id: int, changes: frozenset[bytes]) -> None:
        t = self.model[tx_id]
        if t.status != "in_progress":
            with pytest.raises(TransactionNotInProgressError):
                self.manager.can_commit(tx_id, changes)
            return
        if len(changes) > CONFIG.changeset_count_limit:
            with pytest.raises(TransactionSizeError):
                self.manager.can_commit(tx_id, changes)
            return
        if t.type is TransactionType.SHORT and self._conflicts(tx_id, changes):
            event("can_commit conflict")
            with pytest.raises(TransactionConflictError):
                self.manager.can_commit(tx_id, changes)
            return
        try:
            self.manager.can_commit(tx_id, changes)
        except TransactionConflictError:
            assert t.type is TransactionType.LONG  # long ones: detection is best effort
            return
        self.committing[tx_id] = changes

    @rule(tx_id=txs)
    def commit(self, tx_id: int) -> None:
        t = self.model[tx_id]
        handle = self.handles[tx_id]
        if t.status != "in_progress":
            with pytest.raises(TransactionNotInProgressError):
                self.manager.commit(tx_id, handle.write_pointer)
            return
        commit_pointer = self.last_wp + 1
        changes = self.committing.get(tx_id)
        if (
            changes is not None
            and t.type is TransactionType.SHORT
            and self._conflicts(tx_id, changes)
        ):
            event("commit conflict")
            with pytest.raises(TransactionConflictError):
                self.manager.commit(tx_id, handle.write_pointer)
            return
        try:
            self.manager.commit(tx_id, handle.write_pointer)
        except TransactionConflictError:
            assert t.type is TransactionType.LONG
            return
        if changes:
            self.commits.append((commit_pointer, changes))
        self.committing.pop(tx_id, None)
        t.status = "committed"
        self.read_pointer = max(self.read_pointer, t.checkpoints[-1] if t.checkpoints else tx_id)

    @rule(target=txs, first=KEYS, second=KEYS, commit_second=st.booleans())
    def overlapping_writers(
        self, first: frozenset[bytes], second: frozenset[bytes], commit_second: bool
    ) -> int:
        """Two short transactions; the younger commits first, then the older declares."""
        older = self.start(long=False)
        younger = self.start(long=False)
        self.can_commit(younger, first)
        self.commit(younger)
        self.can_commit(older, second)
        if commit_second:
            self.commit(older)
        return older

    @rule(tx_id=consumes(txs))
    def abort(self, tx_id: int) -> None:
        t = self.model[tx_id]
        handle = self.handles[tx_id]
        self.manager.abort(handle)
        self.committing.pop(tx_id, None)
        if t.type is TransactionType.LONG:
            if t.status == "in_progress":
                self._invalidate(t)
            return
        if t.status == "in_progress":
            t.status = "aborted"
        elif t.status == "invalid" and tx_id in self.invalid:
            self.invalid.discard(tx_id)
            self.invalid.difference_update(handle.checkpoint_write_pointers)
            t.status = "aborted"
        self.read_pointer = max(self.read_pointer, tx_id)

    @rule(
        offset=st.sampled_from([-1, 1, 10**9]),
        op=st.sampled_from(["abort", "commit", "invalidate"]),
    )
    def unknown_transaction(self, offset: int, op: str) -> None:
        """Calls with ids the manager never handed out (next to the newest one, or beyond)."""
        tx_id = self.last_wp + offset
        known = set(self.model).union(*(t.checkpoints for t in self.model.values()))
        if tx_id in known:
            return
        fake = Transaction(transaction_id=tx_id, read_pointer=0, write_pointer=tx_id)
        if op == "abort":
            self.manager.abort(fake)
            if tx_id <= self.last_wp:
                self.read_pointer = max(self.read_pointer, tx_id)
        elif op == "commit":
            with pytest.raises(TransactionNotInProgressError):
                self.manager.commit(tx_id, tx_id)
        else:
            assert not self.manager.invalidate(tx_id)

    @rule(tx_id=txs)
    def invalidate(self, tx_id: int) -> None:
        t = self.model[tx_id]
        changed = self.manager.invalidate(tx_id)
        assert changed == (t.status == "in_progress")
        if changed:
            self._invalidate(t)

    @rule(tx_id=txs)
    def checkpoint(self, tx_id: int) -> None:
        t = self.model[tx_id]
        if t.status != "in_progress":
            with pytest.raises(TransactionNotInProgressError):
                self.manager.checkpoint(self.handles[tx_id])
            return
        new = self.manager.checkpoint(self.handles[tx_id])
        assert new.write_pointer == self._next_wp()
        t.checkpoints.append(new.write_pointer)
        assert list(new.checkpoint_write_pointers) == t.checkpoints
        self.handles[tx_id] = new

    @rule(ms=st.one_of(st.integers(min_value=0, max_value=50), st.just(2_500)))
    def advance_clock_and_expire(self, ms: int) -> None:
        self.clock.advance(ms)
        now = self.clock.now_ms()
        expired = sorted(self.manager.expire_timed_out())
        expected = sorted(
            t.tx_id
            for t in self.model.values()
            if t.status == "in_progress" and now > t.expiration_ms
        )
        assert expired == expected
        for tx_id in expected:
            self._invalidate(self.model[tx_id])

    @rule(data=st.data())
    def truncate_invalid(self, data: st.DataObject) -> None:
        candidates = sorted(self.invalid) or [1]
        ids = data.draw(st.sets(st.sampled_from(candidates), max_size=3))
        assert self.manager.truncate_invalid_tx(ids) == bool(ids & self.invalid)
        self.invalid -= ids

    @rule(back_ms=st.integers(min_value=0, max_value=5000))
    def truncate_invalid_before(self, back_ms: int) -> None:
        time_ms = self.clock.now_ms() - back_ms
        bound = time_ms * 1_000_000
        if any(i < bound for i in self._in_progress_ids()):
            with pytest.raises(InvalidTruncateTimeError):
                self.manager.truncate_invalid_tx_before(time_ms)
            return
        below = {i for i in self.invalid if i < bound}
        assert self.manager.truncate_invalid_tx_before(time_ms) == bool(below)
        self.invalid -= below

    @rule()
    def snapshot(self) -> None:
        self.clock.advance(1)
        assert self.manager.take_snapshot()

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        before = self.manager.get_snapshot()
        if clean:
            self.manager.stop()
        else:
            # A crash: the log is durable up to the last answered call; nothing else runs.
            self.manager.log.close()
            self.storage.close()
        self.storage = self._storage_after_restart()
        self.manager = self._new_manager()
        after = self.manager.get_snapshot()
        assert after == before
        if not clean:
            # every in-progress entry came back (client ids are not persisted)
            assert {
                k: dataclasses.replace(v, client_id=None) for k, v in after.in_progress.items()
            } == dict(before.in_progress)

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def state_matches_model(self) -> None:
        snap = self.manager.get_snapshot()
        assert snap.read_pointer == self.read_pointer
        assert snap.write_pointer == self.last_wp
        assert list(snap.in_progress) == self._in_progress_ids()
        assert snap.invalid == tuple(sorted(self.invalid))
        assert dict(snap.committing) == self.committing

    @precondition(lambda self: hasattr(self, "manager"))
    @invariant()
    def snapshot_storage_is_bounded(self) -> None:
        assert len(self.storage.list_snapshots()) <= CONFIG.snapshot_retain


ManagerMachine.TestCase.settings = settings(
    max_examples=max(300, settings().max_examples), stateful_step_count=40
)
TestManagerStateful = ManagerMachine.TestCase


class PostgresManagerMachine(ManagerMachine):
    """The same model with the state in PostgreSQL; every restart opens a new
    ``PostgresStorage``, i.e. takes a new epoch as a newly elected server would."""

    url = ""

    def _fresh_storage(self) -> StateStorage:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS txn_log_chunk, txn_log, txn_snapshot, txn_leader")
        return PostgresStorage(self.url)

    def _storage_after_restart(self) -> StateStorage:
        return PostgresStorage(self.url)


def test_manager_model_with_state_in_postgres_and_restarts(pg_url: str) -> None:
    PostgresManagerMachine.url = pg_url
    run_state_machine_as_test(
        PostgresManagerMachine,
        settings=settings(max_examples=20, stateful_step_count=30, deadline=None),
    )
