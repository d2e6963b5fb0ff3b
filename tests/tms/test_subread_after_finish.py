"""``read_after_finish`` (``tms.subread``): a subscription read with the reader's
transaction brought up to date by the transaction manager — what committed since shows,
what was invalidated does not, a pointer nobody asked about is asked in a next round,
and a manager that cannot be asked leaves the read as the transaction sees it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.txn.faulty_storage import FaultyStorage
from tms.guard import TransactionStateGuard
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.subscription import EARLIEST, Preferences, SubscriptionId
from txn import InProcessTxClient, TransactionManager, TxConfig
from txn.errors import TxError
from txn.persist.store import TransactionStateStore
from txn.state import WritePointerState

T = TopicId("ns", "t")
S = SubscriptionId(T, "s")


class Source:
    """Fault injection: the manager's state, or an error while ``down``; what was
    asked is kept."""

    def __init__(self, client: InProcessTxClient) -> None:
        self.client = client
        self.down = False
        self.asked: list[list[int]] = []

    def write_pointer_state(
        self, pointers: Iterable[int] = (), durable: bool = False
    ) -> WritePointerState:
        if self.down:
            raise TxError("the transaction server is gone")
        self.asked.append(sorted(pointers))
        return self.client.write_pointer_state(pointers, durable)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[MessagingService, InProcessTxClient, Source]]:
    manager = TransactionManager(TxConfig())
    manager.start()
    client = InProcessTxClient(manager)
    source = Source(client)
    svc = MessagingService(LevelDBStore(tmp_path / "db"), guard=TransactionStateGuard(source))
    svc.create_topic(T)
    svc.subscriptions.create(S, Preferences(transactional=True))
    yield svc, client, source
    svc.close()
    manager.stop()


def _read(svc: MessagingService, reader: object, finished: list[int]) -> list[bytes]:
    poll = svc.subscriptions.read(
        S,
        start_from=EARLIEST,
        transaction=reader,
        finished=finished,  # type: ignore[arg-type]
    )
    return [m.payload for m in poll.messages]


def test_committed_shows_invalidated_does_not_unknown_is_asked_next(
    setup: tuple[MessagingService, InProcessTxClient, Source],
) -> None:
    svc, client, source = setup
    # Given a reader, then three transactions it cannot see: one commits, one is
    # invalidated, one commits but nobody says so
    reader = client.start_short()
    ok, bad, quiet = client.start_short(), client.start_short(), client.start_short()
    svc.publish(StoreRequest.of(T, [b"ok"], ok.write_pointer))
    svc.publish(StoreRequest.of(T, [b"bad"], bad.write_pointer))
    svc.publish(StoreRequest.of(T, [b"quiet"], quiet.write_pointer))
    client.commit_or_throw(ok)
    client.invalidate(bad.transaction_id)
    client.commit_or_throw(quiet)
    # When it reads with what it heard finished (ok and bad)
    got = _read(svc, reader, [ok.write_pointer, bad.write_pointer])
    # Then it gets the committed ones only; the quiet one was asked about in a next round
    assert got == [b"ok", b"quiet"]
    assert quiet.write_pointer not in source.asked[-2]
    assert quiet.write_pointer in source.asked[-1]


def test_a_manager_that_cannot_be_asked_leaves_the_read_as_the_transaction_sees_it(
    setup: tuple[MessagingService, InProcessTxClient, Source],
) -> None:
    svc, client, source = setup
    holder = client.start_short()
    svc.publish(StoreRequest.of(T, [b"one"], holder.write_pointer))
    reader = client.start_short()
    client.commit_or_throw(holder)
    source.down = True
    poll = svc.subscriptions.read(
        S, start_from=EARLIEST, transaction=reader, finished=[holder.write_pointer]
    )
    assert poll.messages == [] and poll.held and poll.held_pointer == holder.write_pointer


def test_a_commit_not_yet_durable_is_not_read_until_it_is(tmp_path: Path) -> None:
    """The transaction log's sync is held (a slow disk): a commit applied in memory
    could still be lost by a crash, so a re-read told it finished shows its messages
    only once the commit is durable."""
    storage = FaultyStorage()
    manager = TransactionManager(TxConfig(), TransactionStateStore(storage))
    manager.start()
    client = InProcessTxClient(manager)
    svc = MessagingService(LevelDBStore(tmp_path / "db"), guard=TransactionStateGuard(client))
    pool = ThreadPoolExecutor(2)
    try:
        svc.create_topic(T)
        svc.subscriptions.create(S, Preferences(transactional=True))
        holder = client.start_short()
        svc.publish(StoreRequest.of(T, [b"one"], holder.write_pointer))
        reader = client.start_short()
        storage.gate.clear()
        storage.holding.clear()
        commit = pool.submit(client.commit_or_throw, holder)
        assert storage.holding.wait(10)  # committed in memory, not yet durable
        read = pool.submit(_read, svc, reader, [holder.write_pointer])
        with pytest.raises(TimeoutError):
            read.result(0.5)
        storage.gate.set()
        commit.result(10)
        assert read.result(10) == [b"one"]
    finally:
        storage.gate.set()
        pool.shutdown()
        svc.close()
        manager.stop()
