"""``SqliteTable``: Tephra's visibility rules against a real manager, a dict model under
Hypothesis, crash (persisted, never committed) and invalid-list pruning."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.fakes import FakeClock
from txn import InProcessTxClient, TransactionContext, TransactionManager, TxConfig
from txn.errors import InvalidStateError, TransactionConflictError, TransactionFailureError
from txn.prune import TransactionPruner
from txn.sqlite_table import SqliteTable
from txn.transaction import VisibilityLevel

CONFIG = TxConfig(cleanup_interval_s=0, snapshot_interval_s=0)


@dataclass
class System:
    manager: TransactionManager
    client: InProcessTxClient
    clock: FakeClock
    path: Path

    def table(self, name: str = "t") -> SqliteTable:
        return SqliteTable(self.path, name)


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    clock = FakeClock()
    manager = TransactionManager(CONFIG, clock=clock)
    manager.start()
    yield System(manager, InProcessTxClient(manager), clock, tmp_path / "kv.db")
    manager.stop()


def test_committed_writes_are_visible_to_later_transactions_only(system: System) -> None:
    writer, reader, later = system.table(), system.table(), system.table()
    early = TransactionContext(system.client, reader)
    early.start()  # Given a reader that started before the write committed
    with TransactionContext(system.client, writer):
        writer.put(b"k", b"v1")
        assert writer.get(b"k") == b"v1"  # own writes are visible at once
    assert reader.get(b"k") is None  # committed after its snapshot: not visible
    early.finish()
    with TransactionContext(system.client, later):
        assert later.get(b"k") == b"v1"
        assert later.scan() == [(b"k", b"v1")]


def test_in_progress_writes_are_invisible_even_when_persisted(system: System) -> None:
    writer, reader = system.table(), system.table()
    ctx = TransactionContext(system.client, writer)
    ctx.start()
    writer.put(b"k", b"v")
    assert writer.commit_tx()  # persisted under its write pointer, not committed
    with TransactionContext(system.client, reader):
        assert reader.get(b"k") is None and reader.scan() == []
    ctx.finish()
    with TransactionContext(system.client, reader):
        assert reader.get(b"k") == b"v"


def test_a_crashed_writer_stays_invisible_once_invalidated(system: System) -> None:
    # Given a writer that persisted and then died (never committed nor aborted)
    writer = system.table()
    tx = system.client.start_short()
    writer.start_tx(tx)
    writer.put(b"k", b"lost")
    assert writer.commit_tx()
    # When the manager invalidates it (as it does when it times out)
    system.client.invalidate(tx.transaction_id)
    # Then no later transaction sees its write
    reader = system.table()
    with TransactionContext(system.client, reader):
        assert reader.get(b"k") is None


def test_rollback_removes_own_writes_also_across_checkpoints(system: System) -> None:
    table = system.table()
    ctx = TransactionContext(system.client, table)
    ctx.start()
    table.put(b"a", b"1")
    ctx.checkpoint()  # persists "a" under the first write pointer
    table.put(b"b", b"2")
    assert table.get(b"a") == b"1" and table.get(b"b") == b"2"
    with pytest.raises(TransactionFailureError):
        ctx.abort(TransactionFailureError("application failed"))
    rows = table._db.execute("SELECT count(*) FROM versions").fetchone()[0]
    assert rows == 0  # nothing left behind
    with TransactionContext(system.client, table):
        assert table.scan() == []


def test_deletes_and_overwrites(system: System) -> None:
    table = system.table()
    with TransactionContext(system.client, table):
        table.put(b"a", b"1")
        table.put(b"b", b"2")
    with TransactionContext(system.client, table):
        table.delete(b"a")
        table.put(b"b", b"3")
        assert table.get(b"a") is None and table.scan() == [(b"b", b"3")]
    with TransactionContext(system.client, table):
        assert table.scan(b"a", b"z") == [(b"b", b"3")]
        assert table.scan(b"c") == []


def test_concurrent_writes_to_one_key_conflict(system: System) -> None:
    one, two = system.table(), system.table()
    first, second = TransactionContext(system.client, one), TransactionContext(system.client, two)
    first.start()
    second.start()
    one.put(b"k", b"1")
    two.put(b"k", b"2")
    first.finish()
    with pytest.raises(TransactionConflictError):
        second.finish()
    with TransactionContext(system.client, one):
        assert one.get(b"k") == b"1"  # the loser's persisted write was rolled back


def test_tables_of_other_names_are_separate(system: System) -> None:
    orders, users = system.table("orders"), system.table("users")
    with TransactionContext(system.client, orders, users):
        orders.put(b"k", b"order")
        users.put(b"k", b"user")
    with TransactionContext(system.client, orders, users):
        assert (orders.get(b"k"), users.get(b"k")) == (b"order", b"user")
        assert orders.get_tx_changes() == []


def test_exclude_current_hides_the_current_write_pointer(system: System) -> None:
    table = system.table()
    ctx = TransactionContext(system.client, table)
    tx = ctx.start()
    table.put(b"k", b"v")
    table.update_tx(tx.with_visibility(VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT))
    assert table.get(b"k") is None
    ctx.abort()


def test_use_outside_a_transaction_is_refused(system: System) -> None:
    table = system.table()
    with pytest.raises(InvalidStateError):
        table.get(b"k")
    with pytest.raises(InvalidStateError):
        table.put(b"k", b"v")


def test_prune_plugin_removes_invalid_rows_and_reports_its_bound(system: System) -> None:
    # Given an invalid transaction that left a row, and a committed one
    table = system.table()
    bad = system.client.start_short()
    table.start_tx(bad)
    table.put(b"k", b"invalid")
    assert table.commit_tx()
    system.client.invalidate(bad.transaction_id)
    with TransactionContext(system.client, table):
        table.put(b"k", b"good")
    pruner = TransactionPruner(
        system.client, [table], max_lifetime_s=1, grace_s=0, clock=system.clock
    )
    system.clock.advance(10_000)
    # Before the table's cleanup step it reports no bound: nothing is pruned
    assert table.fetch_prune_upper_bound(system.clock.now_ms(), 2**62) == -1
    assert pruner.run_once() == []
    # When its cleanup step runs with a fresh snapshot
    snapshot = system.client.start_short()
    system.client.abort(snapshot)
    assert table.remove_invalid(snapshot) == 1
    # Then pruning truncates the invalid id, and the committed value is untouched
    assert pruner.run_once() == [bad.transaction_id]
    assert system.manager.invalid_size() == 0
    with TransactionContext(system.client, table):
        assert table.get(b"k") == b"good"


def test_the_bound_stops_below_the_oldest_transaction_in_progress(system: System) -> None:
    table = system.table()
    running = system.client.start_long()
    invalid = system.client.start_short()
    system.client.invalidate(invalid.transaction_id)
    snapshot = system.client.start_short()
    system.client.abort(snapshot)
    table.remove_invalid(snapshot)
    assert table.fetch_prune_upper_bound(0, 2**62) == running.transaction_id - 1
    assert table.fetch_prune_upper_bound(0, 5) == 5  # never above the inactive bound


# -- against a dict model -------------------------------------------------------------

KEYS = st.sampled_from([b"a", b"b", b"c"])
VALUES = st.binary(min_size=0, max_size=3)


@dataclass
class Session:
    table: SqliteTable
    context: TransactionContext
    view: dict[bytes, bytes] = field(default_factory=dict)
    """What this transaction must see: committed at its start, then its own writes."""
    writes: set[bytes] = field(default_factory=set)
    commits_before: int = 0


class TableMachine(RuleBasedStateMachine):
    """Three sessions on one file against a model: a dict of committed values and, per
    open transaction, its snapshot with its own writes. Conflicts are predicted: a
    transaction conflicts when a transaction that committed after it started wrote one of
    its keys."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.clock = FakeClock()
        self.manager = TransactionManager(CONFIG, clock=self.clock)
        self.manager.start()
        self.client = InProcessTxClient(self.manager)
        self.path = Path(self.dir.name) / "kv.db"
        self.sessions = [self._session() for _ in range(3)]
        self.open: dict[int, Session] = {}
        self.committed: dict[bytes, bytes] = {}
        self.history: list[set[bytes]] = []  # change sets in commit order

    def _session(self) -> Session:
        table = SqliteTable(self.path)
        return Session(table, TransactionContext(self.client, table))

    def teardown(self) -> None:
        for session in self.sessions:
            session.table.close()
        self.manager.stop()
        self.dir.cleanup()

    @rule(i=st.integers(0, 2))
    def start(self, i: int) -> None:
        if i in self.open:
            return
        session = self.sessions[i]
        session.context.start()
        session.view = dict(self.committed)
        session.writes = set()
        session.commits_before = len(self.history)
        self.open[i] = session

    @precondition(lambda self: self.open)
    @rule(data=st.data(), key=KEYS, value=VALUES)
    def put(self, data: st.DataObject, key: bytes, value: bytes) -> None:
        session = self.open[data.draw(st.sampled_from(sorted(self.open)))]
        session.table.put(key, value)
        session.view[key] = value
        session.writes.add(key)

    @precondition(lambda self: self.open)
    @rule(data=st.data(), key=KEYS)
    def delete(self, data: st.DataObject, key: bytes) -> None:
        session = self.open[data.draw(st.sampled_from(sorted(self.open)))]
        session.table.delete(key)
        session.view.pop(key, None)
        session.writes.add(key)

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def checkpoint(self, data: st.DataObject) -> None:
        self.open[data.draw(st.sampled_from(sorted(self.open)))].context.checkpoint()

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(sorted(self.open)))
        session = self.open.pop(i)
        later = self.history[session.commits_before :]
        conflicts = any(session.writes & keys for keys in later)
        if conflicts:
            with pytest.raises(TransactionConflictError):
                session.context.finish()
            return
        session.context.finish()
        if session.writes:
            self.history.append(set(session.writes))
        for key in session.writes:
            if key in session.view:
                self.committed[key] = session.view[key]
            else:
                self.committed.pop(key, None)

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        self.open.pop(data.draw(st.sampled_from(sorted(self.open)))).context.abort()

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def crash_after_persisting(self, data: st.DataObject) -> None:
        """The writer persisted and vanished; the manager invalidates it on timeout."""
        i = data.draw(st.sampled_from(sorted(self.open)))
        session = self.open.pop(i)
        tx = session.context.current_transaction
        assert tx is not None
        session.table.commit_tx()
        self.client.invalidate(tx.transaction_id)
        self.sessions[i] = self._session()  # a new process

    @precondition(lambda self: not self.open)
    @rule()
    def clean_invalid_rows(self) -> None:
        snapshot = self.client.start_short()
        self.client.abort(snapshot)
        self.sessions[0].table.remove_invalid(snapshot)

    @invariant()
    def every_open_transaction_sees_its_model(self) -> None:
        for session in self.open.values():
            for key in (b"a", b"b", b"c"):
                assert session.table.get(key) == session.view.get(key)
            assert session.table.scan() == sorted(session.view.items())

    @invariant()
    def a_new_transaction_sees_what_was_committed(self) -> None:
        reader = SqliteTable(self.path)
        try:
            with TransactionContext(self.client, reader):
                assert reader.scan() == sorted(self.committed.items())
        finally:
            reader.close()


TestTableMachine = TableMachine.TestCase
TestTableMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
