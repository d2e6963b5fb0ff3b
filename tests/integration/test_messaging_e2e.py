"""End to end: the real transaction server (Thrift, loopback) and the real messaging
service (HTTP, loopback, LevelDB), driven through the Python clients.

* a ``TransactionContext`` with the transaction-aware publisher and another participant:
  committed -> visible to transactional consumers; aborted -> never visible; in progress
  -> transactional consumers stop before it;
* staged publishing for long transactions, checkpoints, the data manager for the
  ``transaction`` package;
* non-transactional publishing keeps working while the transaction server is down;
* error bodies map back to the error tree.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import transaction as zope_transaction

from tests.fakes import RecordingParticipant
from tests.servers import Stack, running_stack
from tms.client import MessagingClient
from tms.client.aware import TransactionalFetcher, TransactionalPublisher
from tms.client.datamanager import MessagingDataManager
from tms.errors import (
    ERROR_CODES,
    ServiceUnavailableError,
    TmsError,
    TmsInvalidArgumentError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
)
from tms.model import TopicId
from txn.context import TransactionContext
from txn.errors import TransactionFailureError
from txn.rpc.client import ThriftTxClient
from txn.transaction import Transaction

T = TopicId("app", "events")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path) as running:
        running.messaging.create_topic(T)
        yield running


def committed_view(stack: Stack) -> list[bytes]:
    reader = stack.tx.start_short()
    try:
        return [m.payload for m in stack.messaging.poll(T, transaction=reader).messages]
    finally:
        stack.tx.abort(reader)


def test_commit_makes_messages_visible_at_once(stack: Stack) -> None:
    publisher = TransactionalPublisher(stack.messaging)
    table = RecordingParticipant("table")
    with TransactionContext(stack.tx, publisher, table):
        publisher.publish(T, ["state changed", "again"])
        assert committed_view(stack) == []  # nothing yet, not even to us outside
    assert table.committed and table.post_committed
    assert committed_view(stack) == [b"state changed", b"again"]


def test_in_progress_transaction_holds_consumers(stack: Stack) -> None:
    stack.messaging.publish(T, ["before"])
    publisher = TransactionalPublisher(stack.messaging)
    ctx = TransactionContext(stack.tx, publisher)
    ctx.start()
    publisher.publish(T, ["pending"])
    publisher.commit_tx()  # published with the write pointer; the transaction is not committed
    stack.messaging.publish(T, ["after"])
    reader = stack.tx.start_short()
    result = stack.messaging.poll(T, transaction=reader)
    stack.tx.abort(reader)
    assert [m.payload for m in result.messages] == [b"before"] and result.held
    ctx.finish()
    assert committed_view(stack) == [b"before", b"pending", b"after"]


def test_abort_is_never_visible(stack: Stack) -> None:
    publisher = TransactionalPublisher(stack.messaging)
    failing = RecordingParticipant("table")
    failing.fail_commit = RuntimeError("disk full")
    with pytest.raises(TransactionFailureError), TransactionContext(stack.tx, publisher, failing):
        publisher.publish(T, ["never"])
    assert committed_view(stack) == []
    # non-transactional consumers see everything, rolled back included
    assert [m.payload for m in stack.messaging.poll(T).messages] == [b"never"]


def test_exception_in_the_block_rolls_back(stack: Stack) -> None:
    publisher = TransactionalPublisher(stack.messaging)
    with pytest.raises(KeyError), TransactionContext(stack.tx, publisher):
        publisher.publish(T, ["no"])
        publisher.commit_tx()  # even if already published
        raise KeyError("boom")
    assert committed_view(stack) == []


def test_staged_publishing_and_checkpoints(stack: Stack) -> None:
    publisher = TransactionalPublisher(stack.messaging, staged=True)
    fetcher = TransactionalFetcher(stack.messaging)
    ctx = TransactionContext(stack.tx, publisher, fetcher)
    ctx.start_long()
    publisher.publish(T, [f"part1-{i}" for i in range(5)])
    ctx.checkpoint()  # publishes a commit marker for the first write pointer
    publisher.publish(T, [f"part2-{i}" for i in range(5)])
    own = [m.payload for m in fetcher.fetch(T).messages]
    assert own[:5] == [f"part1-{i}".encode() for i in range(5)]  # a transaction sees its own writes
    assert committed_view(stack) == []
    ctx.finish()
    assert committed_view(stack) == [f"part{p}-{i}".encode() for p in (1, 2) for i in range(5)]


def test_data_manager_joins_the_transaction_package(stack: Stack) -> None:
    manager = zope_transaction.TransactionManager()
    dm = MessagingDataManager(stack.messaging, stack.tx, manager)
    with manager:
        dm.publish(T, ["via 2pc"])
    assert committed_view(stack) == [b"via 2pc"]
    with pytest.raises(ValueError), manager:
        dm.publish(T, ["aborted"])
        raise ValueError("no")
    assert committed_view(stack) == [b"via 2pc"]
    manager.begin()
    dm.publish(T, ["vote fails"])
    manager.get().join(FailingVote())
    with pytest.raises(RuntimeError):
        manager.commit()
    manager.abort()
    assert committed_view(stack) == [b"via 2pc"]


def nothing_listening() -> MessagingClient:
    """A client of a loopback port nobody listens on: every request gets no answer."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return MessagingClient(f"http://127.0.0.1:{port}", retries=0)


def finished_how(stack: Stack, tx: Transaction) -> str:
    state = stack.tx.write_pointer_state([tx.write_pointer])
    if tx.write_pointer in state.in_progress:
        return "in progress"
    return "invalidated" if tx.write_pointer in state.invalid else "aborted or committed"


def test_a_refused_publish_aborts_and_an_unanswered_one_invalidates(stack: Stack) -> None:
    # A 4xx answer: the service stored nothing, the rollback is proven, the tx aborts
    publisher = TransactionalPublisher(stack.messaging)
    ctx = TransactionContext(stack.tx, publisher)
    tx = ctx.start()
    publisher.publish(TopicId("app", "missing"), ["x"])
    with pytest.raises(TransactionFailureError):
        ctx.finish()
    assert finished_how(stack, tx) == "aborted or committed"
    # No answer: it may be stored, so the transaction is invalidated (buffered and staged)
    for staged in (False, True):
        publisher = TransactionalPublisher(nothing_listening(), staged=staged)
        ctx = TransactionContext(stack.tx, publisher)
        tx = ctx.start()
        with pytest.raises((TransactionFailureError, ServiceUnavailableError)):
            publisher.publish(T, ["maybe"])
            ctx.finish()
        ctx.abort()
        assert finished_how(stack, tx) == "invalidated"


def test_a_staged_store_without_an_answer_prevents_the_commit(stack: Stack) -> None:
    publisher = TransactionalPublisher(stack.messaging, staged=True)
    ctx = TransactionContext(stack.tx, publisher)
    tx = ctx.start()
    publisher.publish(T, ["first"])
    publisher.client = nothing_listening()
    with pytest.raises(ServiceUnavailableError):
        publisher.publish(T, ["second"])  # stored or not: nobody knows
    publisher.client = stack.messaging
    # Even when the application goes on, the transaction must not commit
    with pytest.raises(TransactionFailureError):
        ctx.finish()
    assert finished_how(stack, tx) == "invalidated"
    assert committed_view(stack) == []


def test_staged_payloads_of_an_aborted_transaction_are_invalidated(stack: Stack) -> None:
    publisher = TransactionalPublisher(stack.messaging, staged=True)
    with pytest.raises(KeyError), TransactionContext(stack.tx, publisher) as ctx:
        tx = ctx.current_transaction
        publisher.publish(T, ["staged"])
        raise KeyError("no")
    assert tx is not None and finished_how(stack, tx) == "invalidated"


def test_data_manager_invalidates_when_a_publish_is_unanswered(stack: Stack) -> None:
    manager = zope_transaction.TransactionManager()
    dm = MessagingDataManager(nothing_listening(), stack.tx, manager)
    before = stack.tx.invalid_size()
    with pytest.raises(ServiceUnavailableError), manager:
        dm.publish(T, ["maybe"])
    assert stack.tx.invalid_size() == before + 1
    assert stack.manager.write_pointer_state().in_progress == frozenset()


class FailingVote:
    transaction_manager = None

    def abort(self, txn: object) -> None: ...
    def tpc_begin(self, txn: object) -> None: ...
    def commit(self, txn: object) -> None: ...

    def tpc_vote(self, txn: object) -> None:
        raise RuntimeError("another resource says no")

    def tpc_finish(self, txn: object) -> None: ...
    def tpc_abort(self, txn: object) -> None: ...

    def sortKey(self) -> str:
        return "zzz-fails-last"


def test_non_transactional_publishing_survives_the_transaction_server(stack: Stack) -> None:
    stack.tx_server.stop()
    stack.messaging.publish(T, ["still works"])
    assert [m.payload for m in stack.messaging.poll(T).messages] == [b"still works"]


def test_errors_map_back_to_the_tree(stack: Stack) -> None:
    with pytest.raises(TopicAlreadyExistsError):
        stack.messaging.create_topic(T)
    with pytest.raises(TopicNotFoundError):
        stack.messaging.poll(TopicId("app", "missing"))
    with pytest.raises(TmsInvalidArgumentError):
        stack.messaging.publish(T, [])
    codes = {cls.code for cls in _all_subclasses(TmsError)} | {TmsError.code}
    assert codes <= set(ERROR_CODES), "every error class must be mapped back"
    assert len(codes) == len(_all_subclasses(TmsError)) + 1, "codes must be distinct"


def _all_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found.add(sub)
        found |= _all_subclasses(sub)
    return found


def test_follow_and_unreachable_service(stack: Stack) -> None:
    stack.messaging.publish(T, ["a", "b"])
    seen: list[bytes] = []
    stop = threading.Event()
    timer = threading.Timer(0.2, lambda: stack.messaging.publish(T, ["c"]))
    timer.start()
    for message in stack.messaging.follow(T, tx_client=stack.tx, wait_ms=2000, stop=stop.is_set):
        seen.append(message.payload)
        if len(seen) == 3:
            stop.set()
    timer.join()
    assert seen == [b"a", b"b", b"c"]
    dead = MessagingClient("http://127.0.0.1:1", retries=1, backoff_s=0.0)
    with pytest.raises(ServiceUnavailableError):
        dead.list_topics("app")


class CountingTxClient:
    """The real transaction client, counting the transactions it starts and aborts."""

    def __init__(self, inner: ThriftTxClient) -> None:
        self.inner = inner
        self.started: list[Transaction] = []
        self.aborted: list[Transaction] = []

    def start_short(self, timeout_s: int | None = None) -> Transaction:
        tx = self.inner.start_short(timeout_s)
        self.started.append(tx)
        return tx

    def abort(self, tx: Transaction) -> None:
        self.aborted.append(tx)
        self.inner.abort(tx)


def test_follow_reuses_its_transaction_until_it_is_held(stack: Stack) -> None:
    """Following costs no transaction per read; a transaction that commits after the
    reader's started is still delivered (the read is held, a new transaction passes it);
    one in progress is never skipped."""
    counting = CountingTxClient(stack.tx)
    publisher = TransactionalPublisher(stack.messaging)
    seen: list[bytes] = []
    follower = stack.messaging.follow(T, tx_client=counting, wait_ms=2000, tx_refresh_s=3600)
    stack.messaging.publish(T, ["a"])
    seen.append(next(follower).payload)
    for i in range(5):  # non-transactional messages: visible to the old transaction
        stack.messaging.publish(T, [f"n{i}"])
        seen.append(next(follower).payload)
    assert len(counting.started) == 1
    ctx = TransactionContext(stack.tx, publisher)
    ctx.start()
    publisher.publish(T, ["t1", "t2"])
    publisher.commit_tx()  # written with its write pointer, not committed yet
    stack.messaging.publish(T, ["after"])  # behind the uncommitted entries

    def commit_once_held_twice() -> None:
        # the reader is held: once with its first transaction, once with a new one
        while len(counting.started) < 3:
            time.sleep(0.001)
        ctx.finish()

    committer = threading.Thread(target=commit_once_held_twice)
    committer.start()
    seen.extend(next(follower).payload for _ in range(3))
    committer.join()
    assert seen == [b"a", b"n0", b"n1", b"n2", b"n3", b"n4", b"t1", b"t2", b"after"]
    # held with the old transaction, then with a new one per held read until the commit
    # (how many depends on how long the commit took; the reads above show that reads
    # that are not held cost no transaction)
    assert len(counting.started) >= 3
    follower.close()  # the generator's finally aborts the transaction in use
    assert counting.aborted == counting.started


def test_staged_checkpoints_and_markers_commit_as_one(stack: Stack) -> None:
    """The pattern of a parallel job: each worker stages under its own checkpoint of one
    long transaction; markers for the ones that succeeded go out in one request; the
    commit makes exactly those visible, together and contiguous."""
    job = stack.tx.start_long()
    attempts = [stack.tx.checkpoint(job) for _ in range(3)]
    for i, attempt in enumerate(attempts):
        stack.messaging.store(
            T, [f"w{i}-a", f"w{i}-b"], tx_write_pointer=attempt.write_pointer, ttls=[60, None]
        )
    stack.messaging.publish(T, ["outside"])
    # the middle attempt "failed": its rows are never marked
    winners = [attempts[0].write_pointer, attempts[2].write_pointer]
    outcome = stack.messaging.publish_markers(T, winners, idempotency_key="job-1")
    assert not outcome.duplicate and len(outcome.tokens) == 2
    # before the commit a transactional reader stops at the first marker
    reader = stack.tx.start_short()
    bounds = stack.messaging.bounds(T, transaction=reader)
    first_marker = outcome.tokens[0].detail
    assert bounds.held == (first_marker.start_ms, first_marker.start_seq)
    assert [m.payload for m in stack.messaging.poll(T, transaction=reader).messages] == [b"outside"]
    stack.tx.abort(reader)
    assert stack.messaging.publish_markers(T, winners, idempotency_key="job-1").duplicate
    stack.tx.can_commit_or_throw(job, [])
    stack.tx.commit_or_throw(job)
    assert committed_view(stack) == [b"outside", b"w0-a", b"w0-b", b"w2-a", b"w2-b"]
    reader = stack.tx.start_short()
    assert stack.messaging.bounds(T, transaction=reader).held is None
    stack.tx.abort(reader)


def test_background_publisher(stack: Stack) -> None:
    from tms.client.background import BackgroundPublisher

    done: list[object] = []
    with BackgroundPublisher(stack.messaging, max_pending=10, max_batch=4) as background:
        futures = [background.submit(T, f"m{i}", callback=done.append) for i in range(50)]
        missing = background.submit(TopicId("app", "missing"), "x")
        assert background.flush(10)
    for future in futures:
        assert future.result(0) is None
    with pytest.raises(TopicNotFoundError):
        missing.result(0)
    assert len(done) == 50
    assert [m.payload for m in stack.messaging.poll(T).messages] == [
        f"m{i}".encode() for i in range(50)
    ]
