"""Tephra's TransactionContextTest matrix, plus the Python context-manager form."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import RecordingParticipant
from tests.txn.harness import in_process_system
from tests.txn.tracking import Outcome, TrackingClient
from txn.context import TransactionContext
from txn.errors import InvalidStateError, TransactionConflictError, TransactionFailureError
from txn.inmemory import InProcessTxClient


@pytest.fixture
def client() -> Iterator[TrackingClient]:
    with in_process_system() as s:
        assert isinstance(s.client, InProcessTxClient)
        yield TrackingClient(s.client)


@pytest.fixture
def ds1() -> RecordingParticipant:
    return RecordingParticipant("ds1", [b"a"])


@pytest.fixture
def ds2() -> RecordingParticipant:
    return RecordingParticipant("ds2", [b"b"])


def run(ctx: TransactionContext) -> None:
    ctx.start()
    ctx.finish()


def test_successful(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    run(TransactionContext(client, ds1, ds2))
    for ds in (ds1, ds2):
        assert ds.started and ds.checked and ds.committed and ds.post_committed
        assert not ds.rolled_back
    assert client.outcome is Outcome.COMMITTED


def test_post_commit_failure(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ds1.fail_post_commit = RuntimeError("post failure")
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(TransactionFailureError) as err:
        ctx.finish()
    assert str(err.value.__cause__) == "post failure"
    assert ds1.post_committed and ds2.post_committed
    assert not ds1.rolled_back and not ds2.rolled_back
    assert client.outcome is Outcome.COMMITTED
    assert ctx.current_transaction is None


def test_persist_failure(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ds1.fail_commit = RuntimeError("persist failure")
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(
        TransactionFailureError, match="persist changes of transaction-aware 'ds1'"
    ) as err:
        ctx.finish()
    assert str(err.value.__cause__) == "persist failure"
    assert ds1.committed and not ds2.committed
    assert ds1.rolled_back and ds2.rolled_back
    assert client.outcome is Outcome.ABORTED


def test_persist_false(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ds1.commit_result = False
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(TransactionFailureError) as err:
        ctx.finish()
    assert err.value.__cause__ is None
    assert ds1.rolled_back and ds2.rolled_back and not ds2.committed
    assert client.outcome is Outcome.ABORTED


@pytest.mark.parametrize("rollback", ["raises", "false"])
@pytest.mark.parametrize("persist", ["raises", "false"])
def test_persist_and_rollback_failure(
    client: TrackingClient,
    ds1: RecordingParticipant,
    ds2: RecordingParticipant,
    persist: str,
    rollback: str,
) -> None:
    if persist == "raises":
        ds1.fail_commit = RuntimeError("persist failure")
    else:
        ds1.commit_result = False
    if rollback == "raises":
        ds1.fail_rollback = RuntimeError("rollback failure")
    else:
        ds1.rollback_result = False
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(TransactionFailureError) as err:
        ctx.finish()
    if persist == "raises":
        assert str(err.value.__cause__) == "persist failure"
    else:
        assert err.value.__cause__ is None
    if rollback == "raises":
        assert [str(e.__cause__) for e in err.value.suppressed] == ["rollback failure"]
    assert ds1.rolled_back and ds2.rolled_back
    assert client.outcome is Outcome.INVALIDATED


def test_commit_false(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    client.conflicts_on_commit = 1
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(TransactionConflictError) as err:
        ctx.finish()
    assert err.value.__cause__ is None
    assert ds1.committed and ds2.committed
    assert ds1.rolled_back and ds2.rolled_back
    assert client.outcome is Outcome.ABORTED


def test_can_commit_false(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    client.conflicts_on_can_commit = 1
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(TransactionConflictError):
        ctx.finish()
    assert ds1.checked and ds2.checked
    assert not ds1.committed and not ds2.committed
    assert ds1.rolled_back and ds2.rolled_back
    assert client.outcome is Outcome.ABORTED


def test_changes_and_rollback_failure(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ds1.fail_changes = RuntimeError("changes failure")
    ds1.fail_rollback = RuntimeError("rollback failure")
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(TransactionFailureError) as err:
        ctx.finish()
    assert str(err.value.__cause__) == "changes failure"
    assert ds1.checked and not ds2.checked
    assert ds1.rolled_back and ds2.rolled_back
    assert client.outcome is Outcome.INVALIDATED


def test_start_and_rollback_failure(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ds1.fail_start = RuntimeError("start failure")
    ds1.fail_rollback = RuntimeError("rollback failure")
    ctx = TransactionContext(client, ds1, ds2)
    with pytest.raises(
        TransactionFailureError, match="Unable to start transaction-aware 'ds1'"
    ) as err:
        ctx.start()
    assert str(err.value.__cause__) == "start failure"
    assert ds1.started and not ds2.started
    assert not ds1.rolled_back and not ds2.rolled_back
    assert client.outcome is Outcome.ABORTED
    assert ctx.current_transaction is None


def test_add_then_success(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ctx = TransactionContext(client, ds1)
    ctx.start()
    assert ctx.add_transaction_aware(ds2)
    assert ds2.started
    ctx.finish()
    assert ds2.committed and ds2.post_committed
    assert client.outcome is Outcome.COMMITTED


def test_add_then_failure(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ds2.fail_commit = RuntimeError("persist failure")
    ctx = TransactionContext(client, ds1)
    ctx.start()
    ctx.add_transaction_aware(ds2)
    with pytest.raises(TransactionFailureError):
        ctx.finish()
    assert ds1.rolled_back and ds2.rolled_back
    assert client.outcome is Outcome.ABORTED


def test_add_then_remove(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ctx = TransactionContext(client, ds1)
    ctx.start()
    assert ctx.add_transaction_aware(ds2)
    assert not ctx.add_transaction_aware(ds2)
    with pytest.raises(InvalidStateError, match="Cannot remove TransactionAware"):
        ctx.remove_transaction_aware(ds2)
    ctx.finish()
    assert ctx.remove_transaction_aware(ds2)
    assert not ctx.remove_transaction_aware(RecordingParticipant("unknown"))


def test_remove_after_failure(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ds2.fail_commit = RuntimeError("persist failure")
    ctx = TransactionContext(client, ds1, ds2)
    ctx.start()
    with pytest.raises(TransactionFailureError):
        ctx.finish()
    assert ctx.remove_transaction_aware(ds2)
    assert client.outcome is Outcome.ABORTED


@pytest.mark.parametrize("step", ["start", "changes", "persist", "rollback", "post"])
def test_name_failure_is_suppressed_and_context_stays_usable(
    client: TrackingClient, step: str
) -> None:
    ds = RecordingParticipant("ds")
    ds.fail_name = RuntimeError("get name failure")
    failure = RuntimeError(f"{step} failure")
    if step == "start":
        ds.fail_start = failure
    elif step == "changes":
        ds.fail_changes = failure
    elif step == "persist":
        ds.fail_commit = failure
    elif step == "rollback":
        ds.fail_commit = RuntimeError("persist failure")
        ds.fail_rollback = failure
    else:
        ds.fail_post_commit = failure
    ctx = TransactionContext(client, ds)
    with pytest.raises(TransactionFailureError) as err:
        ctx.start()
        ctx.finish()
    if step == "rollback":
        assert str(err.value.__cause__) == "persist failure"
        assert "unknown" in str(err.value)
        rollback_error = err.value.suppressed[1]
        assert isinstance(rollback_error, TransactionFailureError)
        assert str(rollback_error.__cause__) == "rollback failure"
    else:
        assert str(err.value.__cause__) == f"{step} failure"
        assert "'unknown'" in str(err.value)
    assert str(err.value.suppressed[0]) == "get name failure"
    assert ctx.current_transaction is None
    ds.fail_name = ds.fail_start = ds.fail_changes = ds.fail_commit = None
    ds.fail_rollback = ds.fail_post_commit = None
    run(ctx)
    assert client.outcome is Outcome.COMMITTED


def test_finish_without_start(client: TrackingClient) -> None:
    with pytest.raises(InvalidStateError, match="Cannot finish tx that has not been started"):
        TransactionContext(client).finish()


def test_checkpoint_moves_every_participant(
    client: TrackingClient, ds1: RecordingParticipant, ds2: RecordingParticipant
) -> None:
    ctx = TransactionContext(client, ds1, ds2)
    tx = ctx.start()
    tx2 = ctx.checkpoint()
    assert tx2.transaction_id == tx.transaction_id and tx2.write_pointer > tx.write_pointer
    assert ds1.updates == [tx2] and ds2.updates == [tx2]
    assert ds1.committed  # persisted before the checkpoint
    ctx.finish()
    assert client.outcome is Outcome.COMMITTED


def test_with_block_commits(client: TrackingClient, ds1: RecordingParticipant) -> None:
    with TransactionContext(client, ds1) as ctx:
        assert ctx.current_transaction is not None
    assert ds1.post_committed and client.outcome is Outcome.COMMITTED


def test_with_block_exception_aborts_and_propagates_unchanged(
    client: TrackingClient, ds1: RecordingParticipant
) -> None:
    with pytest.raises(KeyError, match="boom"), TransactionContext(client, ds1):
        raise KeyError("boom")
    assert ds1.rolled_back and not ds1.committed
    assert client.outcome is Outcome.ABORTED


def test_with_block_exception_and_failed_rollback_invalidates(
    client: TrackingClient, ds1: RecordingParticipant
) -> None:
    ds1.rollback_result = False
    with pytest.raises(KeyError), TransactionContext(client, ds1):
        raise KeyError("boom")
    assert client.outcome is Outcome.INVALIDATED
