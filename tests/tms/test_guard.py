"""Write-pointer guards against a real transaction manager: what each use allows, what
the cache answers without asking, refreshes shared by concurrent checks, and the
transaction service being down."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests.fakes import FakeClock
from tests.txn.faulty_storage import FaultyStorage
from tests.txn.harness import TxSystem, in_process_system
from tms.errors import TransactionNotInProgressError, TransactionServiceError
from tms.guard import ClockGuard, TransactionStateGuard, Use
from txn.errors import TxServiceUnavailableError
from txn.inmemory import InProcessTxClient
from txn.manager import TransactionManager
from txn.persist.store import TransactionStateStore
from txn.state import WritePointerState
from txn.transaction import MAX_TX_PER_MS

W, M, R = Use.WRITE, Use.MARKER, Use.ROLLBACK


@pytest.fixture
def system() -> Iterator[TxSystem]:
    with in_process_system() as s:
        yield s


@dataclass
class Gate:
    """The transaction service with a door in front: calls wait while it is closed (to
    hold a refresh in flight), and fail while ``down``."""

    system: TxSystem
    open: threading.Event
    calls: int = 0
    down: bool = False
    durable: list[bool] = field(default_factory=list)  # what each call asked for

    def write_pointer_state(
        self, pointers: Collection[int] = (), durable: bool = False
    ) -> WritePointerState:
        self.calls += 1
        self.durable.append(durable)
        self.open.wait(10)
        if self.down:
            raise TxServiceUnavailableError("the transaction service is down")
        return self.system.client.write_pointer_state(pointers, durable)


def gate(system: TxSystem) -> Gate:
    opened = threading.Event()
    opened.set()
    return Gate(system, opened)


def ok(results: list[object]) -> bool:
    return all(r is None for r in results)


def test_uses_allow_what_the_manager_knows(system: TxSystem) -> None:
    client = system.client
    guard = TransactionStateGuard(client, max_age_s=0)
    running = client.start_short()
    checkpoint = client.checkpoint(client.start_short())
    committed = client.start_short()
    client.commit_or_throw(committed)
    invalid = client.start_short()
    client.invalidate(invalid.transaction_id)
    system.clock.advance(1000)
    newest = client.start_short().write_pointer
    never_issued = newest - 1  # in the past, between two issued ones
    future = newest + 3600_000 * MAX_TX_PER_MS

    # A transaction in progress and a checkpoint's pointer may write, mark, roll back
    for wp in (running.write_pointer, checkpoint.write_pointer):
        assert ok(guard.check([(wp, W), (wp, M), (wp, R)]))
    # A committed transaction: no more writes, no rollback; its markers (Spark's stream
    # sink publishes them after the commit) are fine
    results = guard.check([(committed.write_pointer, u) for u in (W, M, R)])
    assert isinstance(results[0], TransactionNotInProgressError) and results[1] is None
    assert isinstance(results[2], TransactionNotInProgressError)
    # An invalid one: rollback only
    results = guard.check([(invalid.write_pointer, u) for u in (W, M, R)])
    assert [r is None for r in results] == [False, False, True]
    # Pointers the manager never issued: nothing, whatever the use — except a marker
    # under a past one, which cannot show anything: only `store` puts payloads under a
    # pointer, and it needs the pointer in progress
    for wp in (never_issued, future, 2**62, -running.write_pointer):
        results = guard.check([(wp, W), (wp, M)])
        assert isinstance(results[0], TransactionNotInProgressError), wp
        assert (results[1] is None) == (wp == never_issued), wp
    assert isinstance(guard.check([(future, R)])[0], TransactionNotInProgressError)


def test_the_cache_answers_known_pointers_and_refreshes_for_new_ones(system: TxSystem) -> None:
    client = system.client
    source = gate(system)
    guard = TransactionStateGuard(source, max_age_s=3600)
    first = client.start_short()
    assert ok(guard.check([(first.write_pointer, W)]))
    assert source.calls == 1
    # Known in progress, and known issued-but-not-in-progress: no call
    assert ok(guard.check([(first.write_pointer, W)] * 3))
    refused = guard.check([(first.write_pointer - 1, W)])
    assert isinstance(refused[0], TransactionNotInProgressError)
    assert source.calls == 1
    # A transaction started since: one refresh for the whole batch
    second, third = client.start_short(), client.start_short()
    assert ok(guard.check([(second.write_pointer, W), (third.write_pointer, W)]))
    assert source.calls == 2
    # A forged pointer from the future costs a refresh and is refused
    assert isinstance(guard.check([(2**62, W)])[0], TransactionNotInProgressError)
    assert source.calls == 3
    # Rollbacks are always checked against a fresh state
    client.commit_or_throw(first)
    assert isinstance(guard.check([(first.write_pointer, R)])[0], TransactionNotInProgressError)
    assert source.calls == 4


def test_concurrent_checks_share_one_refresh(system: TxSystem) -> None:
    client = system.client
    source = gate(system)
    guard = TransactionStateGuard(source, max_age_s=3600)
    # Given a refresh in flight (held at the door)
    source.open.clear()
    results: list[list[object]] = []
    early = client.start_short()
    first = threading.Thread(target=lambda: results.append(guard.check([(early.write_pointer, W)])))
    first.start()
    while source.calls < 1:
        threading.Event().wait(0.001)
    # When eight more checks of new transactions arrive meanwhile
    txs = [client.start_short() for _ in range(8)]
    threads = [
        threading.Thread(target=lambda wp=tx.write_pointer: results.append(guard.check([(wp, W)])))
        for tx in txs
    ]
    for t in threads:
        t.start()
    threading.Event().wait(0.2)  # let them queue behind the running refresh
    source.open.set()
    for t in [first, *threads]:
        t.join(10)
    # Then they were all answered (allowed) by one more call, made after they asked
    assert len(results) == 9 and all(ok(r) for r in results)
    assert source.calls == 2


def test_transaction_service_down(system: TxSystem) -> None:
    client = system.client
    source = gate(system)
    clock = [0.0]
    guard = TransactionStateGuard(source, max_age_s=1.0, monotonic=lambda: clock[0])
    known = client.start_short()
    assert ok(guard.check([(known.write_pointer, W)]))
    source.down = True
    new = client.start_short()
    # A pointer the cache knows in progress is still answered; anything else is 503
    results = guard.check(
        [(known.write_pointer, W), (new.write_pointer, W), (known.write_pointer, R)]
    )
    assert results[0] is None
    assert isinstance(results[1], TransactionServiceError) and results[1].status == 503
    assert isinstance(results[2], TransactionServiceError)
    # Once the cache is older than max_age_s, nothing is answered without the service
    clock[0] = 1.5
    assert isinstance(guard.check([(known.write_pointer, W)])[0], TransactionServiceError)
    source.down = False
    assert ok(guard.check([(known.write_pointer, W), (new.write_pointer, W)]))


def test_clock_guard_refuses_pointers_from_the_future() -> None:
    clock = FakeClock(1_700_000_000_000)
    guard = ClockGuard(clock, skew_s=60)
    now_wp = clock.now_ms() * MAX_TX_PER_MS
    allowed = [now_wp, now_wp + 59_000 * MAX_TX_PER_MS, 1]
    refused = [now_wp + 3600_000 * MAX_TX_PER_MS, 2**62, 0, -now_wp]
    assert ok(guard.check([(wp, W) for wp in allowed] + [(wp, M) for wp in allowed]))
    results = guard.check([(wp, W) for wp in refused] + [(wp, M) for wp in refused])
    assert all(isinstance(r, TransactionNotInProgressError) for r in results)
    # It cannot know which transactions committed: rollbacks pass
    assert ok(guard.check([(wp, R) for wp in allowed + refused]))


def test_readers_answers_wait_for_a_commit_to_be_durable_checks_do_not() -> None:
    """A commit applied in memory whose log edit is not yet synced: ``check`` answers at
    once (a write under it is refused); ``state`` and ``outcomes``, which decide what
    readers see, and a ``Use.COMMITTED`` check (a queue's settle makes messages visible)
    wait until the commit is durable."""
    storage = FaultyStorage()
    manager = TransactionManager(store=TransactionStateStore(storage))
    manager.start()
    client = InProcessTxClient(manager)
    guard = TransactionStateGuard(client, max_age_s=0)
    pool = ThreadPoolExecutor(4)
    try:
        tx = client.start_short()
        wp = tx.write_pointer
        storage.gate.clear()
        storage.holding.clear()
        commit = pool.submit(client.commit_or_throw, tx)
        assert storage.holding.wait(10)
        assert isinstance(guard.check([(wp, Use.WRITE)])[0], TransactionNotInProgressError)
        state = pool.submit(guard.state, [wp])
        outcomes = pool.submit(guard.outcomes, [wp])
        settle = pool.submit(guard.check, [(wp, Use.COMMITTED)])
        with pytest.raises(TimeoutError):
            state.result(0.5)
        assert not outcomes.done() and not settle.done() and not commit.done()
        storage.gate.set()
        commit.result(10)
        assert wp not in state.result(10).in_progress
        assert outcomes.result(10) == {wp: True}
        assert ok(settle.result(10))
    finally:
        storage.gate.set()
        pool.shutdown()
        manager.stop()
