"""Participants that persist concurrently (``txn.persisting``): their ``commit_tx`` calls
are in flight at once, the context waits for all of them before it rolls back or
commits, and a failure of either rolls back both (Tephra's semantics otherwise)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.fakes import RecordingParticipant
from tests.txn.harness import in_process_system
from tests.txn.tracking import Outcome, TrackingClient
from txn.context import TransactionContext
from txn.errors import TransactionFailureError
from txn.inmemory import InProcessTxClient
from txn.persisting import persist_all


class Concurrent(RecordingParticipant):
    """Persists concurrently; ``commit_tx`` first meets the others at ``barrier`` (so it
    fails unless they are all in flight at once), then records what it saw."""

    persists_concurrently = True

    def __init__(self, name: str, barrier: threading.Barrier | None) -> None:
        super().__init__(name)
        self.barrier = barrier
        self.thread: int | None = None
        self.release = threading.Event()
        self.release.set()
        self.finished = threading.Event()
        self.rolled_back_while_in_flight = False

    def commit_tx(self) -> bool:
        self.thread = threading.get_ident()
        try:
            if self.barrier is not None:
                self.barrier.wait()
            assert self.release.wait(10)
            return super().commit_tx()
        finally:
            self.finished.set()

    def rollback_tx(self) -> bool:
        self.rolled_back_while_in_flight = not self.finished.is_set()
        return super().rollback_tx()


@pytest.fixture
def client() -> Iterator[TrackingClient]:
    with in_process_system() as s:
        assert isinstance(s.client, InProcessTxClient)
        yield TrackingClient(s.client)


def barrier(parties: int) -> threading.Barrier:
    return threading.Barrier(parties, timeout=10)  # a guard against a hang: never met


def test_participants_that_persist_concurrently_are_in_flight_at_once(
    client: TrackingClient,
) -> None:
    # Given two participants whose persists each wait until both have started
    meet = barrier(2)
    a, b = Concurrent("a", meet), Concurrent("b", meet)
    # When the transaction finishes, it commits (persisted one after the other, the
    # first would wait at the barrier for the second forever)
    ctx = TransactionContext(client, a, b)
    ctx.start()
    ctx.finish()
    assert a.committed and b.committed and a.post_committed and b.post_committed
    assert client.outcome is Outcome.COMMITTED
    # and the calling thread persisted one of them itself
    assert threading.get_ident() in (a.thread, b.thread) and a.thread != b.thread


def test_a_participant_without_the_flag_persists_in_the_calling_thread(
    client: TrackingClient,
) -> None:
    # Given two concurrent participants and a plain one (say, a SQLite table, whose
    # connection belongs to its thread)
    meet = barrier(3)
    a, b = Concurrent("a", meet), Concurrent("b", meet)
    plain = Concurrent("plain", meet)
    plain.persists_concurrently = False  # type: ignore[misc]
    ctx = TransactionContext(client, a, plain, b)
    ctx.start()
    ctx.finish()
    # Then all three were in flight at once, the plain one in the calling thread
    assert plain.thread == threading.get_ident()
    assert {a.thread, b.thread}.isdisjoint({threading.get_ident()})
    assert client.outcome is Outcome.COMMITTED


@pytest.mark.parametrize("failing", ["first", "second"])
def test_one_fails_while_the_other_is_in_flight_both_roll_back_after_it_returned(
    client: TrackingClient, failing: str
) -> None:
    # Given two concurrent participants, one of which fails at once while the other is
    # still persisting
    a, b = Concurrent("a", None), Concurrent("b", None)
    fails, slow = (a, b) if failing == "first" else (b, a)
    fails.fail_commit = RuntimeError("publish refused")
    slow.release.clear()
    threading.Timer(0.2, slow.release.set).start()
    ctx = TransactionContext(client, a, b)
    ctx.start()
    # When the transaction finishes
    with pytest.raises(
        TransactionFailureError, match=f"persist changes of transaction-aware '{fails.name}'"
    ) as err:
        ctx.finish()
    # Then the failure is the one raised, both were rolled back — only after the slow
    # one's persist returned — and the transaction was aborted, never committed
    assert str(err.value.__cause__) == "publish refused"
    assert a.rolled_back and b.rolled_back and slow.committed
    assert not a.rolled_back_while_in_flight and not b.rolled_back_while_in_flight
    assert client.outcome is Outcome.ABORTED
    assert ctx.current_transaction is None


def test_an_unknown_outcome_in_one_invalidates_and_both_failures_are_reported(
    client: TrackingClient,
) -> None:
    # Given two concurrent participants that both fail, one of which cannot prove its
    # rollback (its write's answer was lost)
    meet = barrier(2)
    a, b = Concurrent("a", meet), Concurrent("b", meet)
    a.fail_commit = RuntimeError("a refused")
    b.fail_commit = RuntimeError("b: answer lost")
    b.rollback_result = False
    ctx = TransactionContext(client, a, b)
    ctx.start()
    with pytest.raises(TransactionFailureError, match="transaction-aware 'a'") as err:
        ctx.finish()
    # Then the transaction is invalidated (its writes may be there), not aborted, and
    # the second failure rides on the first
    assert client.outcome is Outcome.INVALIDATED
    assert any("transaction-aware 'b'" in str(s) for s in err.value.suppressed)


def test_in_the_calling_thread_the_first_failure_stops_the_rest() -> None:
    # Tephra's rule for participants persisted in order: after a failure, the later ones
    # are not persisted (they are rolled back by the context)
    first, second = RecordingParticipant("first"), RecordingParticipant("second")
    first.commit_result = False
    outcomes = persist_all([first, second])
    assert [(o.ok, o.called) for o in outcomes] == [(False, True), (False, False)]
    assert not second.committed
