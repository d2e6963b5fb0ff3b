"""Tephra's TransactionExecutorTest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import RecordingParticipant
from tests.txn.harness import in_process_system
from tests.txn.tracking import Outcome, TrackingClient
from txn.errors import TransactionConflictError, TransactionFailureError
from txn.executor import NoRetries, RetryOnConflict, TransactionExecutor
from txn.inmemory import InProcessTxClient


@pytest.fixture
def client() -> Iterator[TrackingClient]:
    with in_process_system() as s:
        assert isinstance(s.client, InProcessTxClient)
        yield TrackingClient(s.client)


def square(x: int) -> int:
    return x * x


def executor(
    client: TrackingClient, *awares: RecordingParticipant, **kw: object
) -> TransactionExecutor:
    sleeps: list[float] = []
    return TransactionExecutor(client, awares, sleep=sleeps.append, **kw)  # type: ignore[arg-type]


def test_successful(client: TrackingClient) -> None:
    ds1, ds2 = RecordingParticipant("ds1"), RecordingParticipant("ds2")
    assert executor(client, ds1, ds2).execute(square, 10) == 100
    assert ds1.post_committed and ds2.post_committed
    assert client.outcome is Outcome.COMMITTED


def test_persist_failure(client: TrackingClient) -> None:
    ds1 = RecordingParticipant("ds1")
    ds1.fail_commit = RuntimeError("persist failure")
    with pytest.raises(TransactionFailureError) as err:
        executor(client, ds1).execute(square, 10)
    assert str(err.value.__cause__) == "persist failure"
    assert client.outcome is Outcome.ABORTED


def test_post_commit_failure(client: TrackingClient) -> None:
    ds1 = RecordingParticipant("ds1")
    ds1.fail_post_commit = RuntimeError("post failure")
    with pytest.raises(TransactionFailureError):
        executor(client, ds1).execute(square, 10)
    assert client.outcome is Outcome.COMMITTED
    assert client.starts == 1  # not retried


def test_persist_and_rollback_false(client: TrackingClient) -> None:
    ds1 = RecordingParticipant("ds1")
    ds1.commit_result = False
    ds1.rollback_result = False
    with pytest.raises(TransactionFailureError):
        executor(client, ds1).execute(square, 10)
    assert client.outcome is Outcome.INVALIDATED


@pytest.mark.parametrize("where", ["can_commit", "commit"])
def test_no_retry_strategy(client: TrackingClient, where: str) -> None:
    setattr(client, f"conflicts_on_{where}", 1)
    with pytest.raises(TransactionConflictError):
        executor(client, RecordingParticipant("ds1"), retry=NoRetries()).execute(square, 10)
    assert client.outcome is Outcome.ABORTED and client.starts == 1


def test_no_indefinite_retry_by_default(client: TrackingClient) -> None:
    client.conflicts_on_commit = 1000
    with pytest.raises(TransactionConflictError):
        executor(client, RecordingParticipant("ds1")).execute(square, 10)
    assert client.starts == 21  # the first attempt and 20 retries
    assert client.outcome is Outcome.ABORTED


def test_retry_by_default(client: TrackingClient) -> None:
    client.conflicts_on_commit = 2
    sleeps: list[float] = []
    ex = TransactionExecutor(client, [RecordingParticipant("ds1")], sleep=sleeps.append)
    assert ex.execute(square, 10) == 100
    assert client.outcome is Outcome.COMMITTED
    assert sleeps == [0.1, 0.1]


def test_changes_and_rollback_failure(client: TrackingClient) -> None:
    ds1 = RecordingParticipant("ds1")
    ds1.fail_changes = RuntimeError("changes failure")
    ds1.fail_rollback = RuntimeError("rollback failure")
    with pytest.raises(TransactionFailureError):
        executor(client, ds1).execute(square, 10)
    assert client.outcome is Outcome.INVALIDATED


def test_function_and_rollback_failure(client: TrackingClient) -> None:
    ds1 = RecordingParticipant("ds1")
    ds1.rollback_result = False

    def fails(_: int) -> int:
        raise RuntimeError("function failed")

    with pytest.raises(TransactionFailureError, match="Transaction function failure") as err:
        executor(client, ds1).execute(fails, 10)
    assert str(err.value.__cause__) == "function failed"
    assert not ds1.checked
    assert client.outcome is Outcome.INVALIDATED


def test_start_and_rollback_failure(client: TrackingClient) -> None:
    ds1 = RecordingParticipant("ds1")
    ds1.fail_start = RuntimeError("start failure")
    ds1.fail_rollback = RuntimeError("rollback failure")
    with pytest.raises(TransactionFailureError):
        executor(client, ds1).execute(square, 10)
    assert client.outcome is Outcome.ABORTED


def test_decorator_and_custom_retry(client: TrackingClient) -> None:
    client.conflicts_on_can_commit = 3
    ex = executor(
        client, RecordingParticipant("ds1"), retry=RetryOnConflict(max_retries=5, delay_s=0)
    )

    @ex.transactional
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
    assert client.starts == 4


def test_a_retry_after_a_failed_rollback_keeps_the_first_attempt_invalid(
    client: TrackingClient,
) -> None:
    # Given a conflict at commit, and a participant that cannot prove its rollback once
    client.conflicts_on_commit = 1
    ds1 = RecordingParticipant("ds1")
    ds1.rollback_result = False
    ex = TransactionExecutor(client, [ds1], sleep=lambda _s: None)
    # When the executor retries the conflict (a new transaction)
    assert ex.execute(square, 10) == 100
    # Then the first attempt stayed invalidated; only the second committed
    assert client.starts == 2 and client.outcome is Outcome.COMMITTED
    assert client.inner.manager.invalid_size() == 1
