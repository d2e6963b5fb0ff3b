"""Tephra's TransactionSystemTest scenarios, run through the client protocol."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.txn.harness import TxSystem, in_process_system, thrift_system
from txms_common.retry import RetryNTimes
from txn.config import ServerConfig
from txn.errors import (
    InvalidArgumentError,
    InvalidTruncateTimeError,
    TransactionConflictError,
    TransactionNotInProgressError,
    TransactionSizeError,
)
from txn.persist.snapshot_codec import decode_snapshot, unseal_snapshot
from txn.rpc.client import ThriftTxClient
from txn.rpc.server import ServerThread, ThriftServer
from txn.transaction import Transaction, TransactionType

C1, C2, C3, C4 = b"change1", b"change2", b"change3", b"change4"


@pytest.fixture(params=["in-process", "thrift"])
def system(request: pytest.FixtureRequest) -> Iterator[TxSystem]:
    factory = in_process_system if request.param == "in-process" else thrift_system
    with factory() as s:
        yield s


def test_negative_timeout(system: TxSystem) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout must be positive"):
        system.client.start_short(-1)


def test_excessive_timeout(system: TxSystem) -> None:
    with pytest.raises(InvalidArgumentError, match="must not exceed"):
        system.client.start_short(10 * 86_400)


def test_large_change_set(system: TxSystem) -> None:
    client = system.client
    fifty = [bytes([i]) for i in range(50)]
    tx = client.start_short()
    client.can_commit_or_throw(tx, fifty)
    client.commit_or_throw(tx)

    tx = client.start_short()
    with pytest.raises(TransactionSizeError, match="has 51 entries and exceeds the limit of 50"):
        client.can_commit_or_throw(tx, [*fifty, b"\xff"])
    client.abort(tx)

    eight = [bytes([i]) * 256 for i in range(8)]
    tx = client.start_short()
    client.can_commit_or_throw(tx, eight)
    client.commit_or_throw(tx)

    tx = client.start_short()
    with pytest.raises(TransactionSizeError, match="total size of 2049 bytes"):
        client.can_commit_or_throw(tx, [*eight, b"x"])
    client.abort(tx)


def test_commit_race_handling(system: TxSystem) -> None:
    client = system.client
    tx1, tx2 = client.start_short(), client.start_short()
    client.can_commit_or_throw(tx1, [C1, C2])
    client.can_commit_or_throw(tx2, [C2, C3])
    client.commit_or_throw(tx1)
    with pytest.raises(TransactionConflictError) as err:
        client.commit_or_throw(tx2)
    assert err.value.transaction_id == tx2.transaction_id
    assert err.value.conflicting_key == "change2"
    client.abort(tx2)


def test_multiple_commits_at_same_time(system: TxSystem) -> None:
    client = system.client
    tx1, tx2, tx3, tx4, tx5 = (client.start_short() for _ in range(5))
    client.can_commit_or_throw(tx1, [C1])
    client.commit_or_throw(tx1)
    client.can_commit_or_throw(tx2, [C2])
    client.commit_or_throw(tx2)
    # Both commits share one commit pointer; merging the sets must lose neither.
    with pytest.raises(TransactionConflictError):
        client.can_commit_or_throw(tx3, [C1])
    with pytest.raises(TransactionConflictError):
        client.can_commit_or_throw(tx4, [C2])
    client.can_commit_or_throw(tx5, [C3])
    client.commit_or_throw(tx5)
    client.abort(tx3)
    client.abort(tx4)


def test_commit_twice(system: TxSystem) -> None:
    client = system.client
    tx = client.start_short()
    client.can_commit_or_throw(tx, [C1, C2])
    client.commit_or_throw(tx)
    with pytest.raises(TransactionNotInProgressError):
        client.commit_or_throw(tx)


def test_abort_twice(system: TxSystem) -> None:
    client = system.client
    tx = client.start_short()
    client.can_commit_or_throw(tx, [C1, C2])
    client.abort(tx)
    client.abort(tx)


def test_reuse_tx(system: TxSystem) -> None:
    client = system.client
    tx = client.start_short()
    client.can_commit_or_throw(tx, [C1, C2])
    client.commit_or_throw(tx)
    with pytest.raises(TransactionNotInProgressError):
        client.can_commit_or_throw(tx, [C3, C4])
    with pytest.raises(TransactionNotInProgressError):
        client.commit_or_throw(tx)
    client.abort(tx)


def fabricated(tx: Transaction, tx_id: int) -> Transaction:
    return Transaction(
        transaction_id=tx_id,
        read_pointer=tx.read_pointer,
        invalids=tx.invalids,
        in_progress=tx.in_progress,
        first_short_in_progress=tx.first_short_in_progress,
        write_pointer=tx_id,
    )


def test_use_not_started(system: TxSystem) -> None:
    client = system.client
    tx1 = client.start_short()
    client.commit_or_throw(tx1)
    for tx_id in (tx1.transaction_id - 1, tx1.transaction_id + 1):
        tx = fabricated(tx1, tx_id)
        with pytest.raises(TransactionNotInProgressError):
            client.can_commit_or_throw(tx, [C1, C2])
        with pytest.raises(TransactionNotInProgressError):
            client.commit_or_throw(tx)
        client.abort(tx)


def test_abort_after_commit(system: TxSystem) -> None:
    client = system.client
    tx = client.start_short()
    client.can_commit_or_throw(tx, [C1, C2])
    client.commit_or_throw(tx)
    client.abort(tx)


def test_invalidate_tx(system: TxSystem) -> None:
    client = system.client
    tx1 = client.start_short()
    client.can_commit_or_throw(tx1, [C1, C2])
    assert client.invalidate(tx1.transaction_id)
    tx2 = client.start_short()
    client.can_commit_or_throw(tx2, [C3, C4])
    client.commit_or_throw(tx2)
    assert not client.invalidate(tx2.transaction_id)
    assert tx1.transaction_id in client.start_short().invalids


def test_reset_state(system: TxSystem) -> None:
    client = system.client
    tx1 = client.start_short()
    client.can_commit_or_throw(tx1, [C1, C2])
    client.commit_or_throw(tx1)
    tx2 = client.start_short()
    client.can_commit_or_throw(tx2, [C3, C4])
    tx3 = client.start_short()
    client.invalidate(tx3.transaction_id)
    before = system.clock.now_ms()
    system.clock.advance()

    client.reset_state()

    latest_ts = max(system.storage.list_snapshots())
    snap = decode_snapshot(unseal_snapshot(system.storage.read_snapshot(latest_ts)))
    assert latest_ts >= before
    assert not snap.invalid and not snap.in_progress and not snap.committing and not snap.committed
    tx4 = client.start_short()
    assert tx4.transaction_id > tx3.transaction_id
    assert not tx4.invalids and not tx4.in_progress


def test_truncate_invalid_tx(system: TxSystem) -> None:
    client = system.client
    tx1, tx2, tx3 = client.start_long(), client.start_short(), client.start_long()
    for tx in (tx1, tx2, tx3):
        assert client.invalidate(tx.transaction_id)
    assert client.truncate_invalid_tx([tx2.transaction_id, tx3.transaction_id])
    assert client.start_short().invalids == (tx1.transaction_id,)


def test_truncate_invalid_tx_before(system: TxSystem) -> None:
    client, clock = system.client, system.clock
    tx1 = client.start_long()
    tx2 = client.start_short()
    clock.advance()
    before_tx3 = clock.now_ms()
    tx3 = client.start_long()
    with pytest.raises(InvalidTruncateTimeError, match=f"earlier than {before_tx3}"):
        client.truncate_invalid_tx_before(before_tx3)
    for tx in (tx1, tx2, tx3):
        assert client.invalidate(tx.transaction_id)
    assert client.truncate_invalid_tx_before(before_tx3)
    assert client.start_short().invalids == (tx3.transaction_id,)


def test_get_invalid_size(system: TxSystem) -> None:
    client = system.client
    txs = [client.start_long(), client.start_short(), client.start_long()]
    assert client.invalid_size() == 0
    for tx in txs:
        client.invalidate(tx.transaction_id)
    assert client.invalid_size() == 3


def test_checkpointing(system: TxSystem) -> None:
    client = system.client
    tx1, tx2, tx3 = client.start_short(), client.start_short(), client.start_short()
    committed = []
    for _ in range(5):
        tx = client.start_short()
        client.commit_or_throw(tx)
        committed.append(tx.transaction_id)
    tx3c = client.checkpoint(tx3)
    tx2c = client.checkpoint(tx2)
    tx1c = client.checkpoint(tx1)
    for tx, parent in ((tx1c, tx1), (tx2c, tx2), (tx3c, tx3)):
        assert tx.transaction_id == parent.transaction_id
        assert tx.write_pointer > parent.write_pointer
        assert tx.checkpoint_write_pointers == (tx.write_pointer,)
        assert tx.read_pointer == parent.read_pointer and tx.in_progress == parent.in_progress
    for _ in range(5):
        tx = client.start_short()
        client.commit_or_throw(tx)
        committed.append(tx.transaction_id)

    mine = [tx1.transaction_id, tx2.transaction_id, tx3.transaction_id]
    cps = [tx1c.write_pointer, tx2c.write_pointer, tx3c.write_pointer]

    def check_invisible(reader: Transaction, hidden: list[int]) -> None:
        assert list(reader.in_progress) == sorted(reader.in_progress)
        assert list(reader.invalids) == sorted(reader.invalids)
        for v in hidden:
            assert not reader.is_visible(v), v
        for v in committed:
            assert reader.is_visible(v), v

    reader = client.start_short()
    check_invisible(reader, mine + cps)
    client.abort(reader)

    client.abort(tx1c)
    assert client.invalidate(tx2c.transaction_id)
    client.can_commit_or_throw(tx3c, [])
    client.commit_or_throw(tx3c)

    reader = client.start_short()
    # tx1 was aborted (rolled back) and tx2 invalidated: neither may ever become visible.
    assert not reader.is_in_progress(tx1.transaction_id) and not reader.is_in_progress(
        tx1c.write_pointer
    )
    check_invisible(reader, [tx2.transaction_id, tx2c.write_pointer])
    assert reader.is_visible(tx3c.write_pointer) and reader.is_visible(tx3.transaction_id)


def test_long_transactions_are_marked_long(system: TxSystem) -> None:
    tx = system.client.start_long()
    assert tx.type is TransactionType.LONG
    short = system.client.start_short()
    assert short.first_short_in_progress != tx.transaction_id


def test_write_pointer_state(system: TxSystem) -> None:
    client = system.client
    # Given a committed, an invalid, an in-progress transaction and a checkpoint
    committed = client.start_short()
    client.commit_or_throw(committed)
    invalid = client.start_short()
    client.invalidate(invalid.transaction_id)
    running = client.start_short()
    checkpoint = client.checkpoint(client.start_short())
    # When asked about all of them (and a pointer never issued)
    asked = [committed.write_pointer, invalid.write_pointer, running.write_pointer, 12345]
    state = client.write_pointer_state(asked)
    # Then: the in-progress pointers (checkpoints included), the newest issued, the invalid
    assert state.in_progress == {
        running.write_pointer,
        checkpoint.transaction_id,
        checkpoint.write_pointer,
    }
    assert state.write_pointer == checkpoint.write_pointer
    assert state.invalid == {invalid.write_pointer}
    assert client.write_pointer_state().invalid == frozenset()
    # And the durable answer (a reader's) is the same state once nothing is on its way
    assert client.write_pointer_state(asked, durable=True) == state
    # And nothing was logged for it (a read-only call)
    assert system.manager.write_pointer_state([]) == client.write_pointer_state([])


def test_write_pointer_state_from_a_server_without_the_extension() -> None:
    # Tephra's own server does not know writePointerState: it answers UNKNOWN_METHOD,
    # emulated by our server with the method taken out.
    with in_process_system() as local:
        server = ThriftServer(local.manager, ServerConfig(port=0))
        server.dispatcher.methods = server.dispatcher.methods - {"writePointerState"}
        thread = ServerThread(server)
        client = ThriftTxClient(thread.start(), retry=RetryNTimes(2), timeout_s=10)
        try:
            running = local.manager.start_short()
            invalid = local.manager.start_short()
            local.manager.invalidate(invalid.transaction_id)
            state = client.write_pointer_state([invalid.write_pointer, running.write_pointer])
            again = client.write_pointer_state(durable=True)  # durable by construction
        finally:
            client.close()
            thread.stop()
        assert running.write_pointer in state.in_progress
        assert state.invalid == {invalid.write_pointer}
        assert state.write_pointer > running.write_pointer  # the probe's own id
        assert again.write_pointer > state.write_pointer
        assert local.manager.write_pointer_state().in_progress == {running.write_pointer}
