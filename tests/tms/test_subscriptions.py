"""Subscriptions in the messaging core, with a real transaction manager in process and
the service checking write pointers against it: where subscriptions start, positions
that never move backwards by accident nor past what could be read, versions, positions
written as part of transactions, topic generations, lag, filters, cleanup."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tms.cleanup import Cleaner
from tms.codec import keys
from tms.config import TmsConfig
from tms.errors import (
    BadVersionError,
    PositionOutOfRangeError,
    SubscriptionExistsError,
    SubscriptionNotFoundError,
    TmsInvalidArgumentError,
    TopicNotFoundError,
    TransactionNotInProgressError,
)
from tms.guard import TransactionStateGuard
from tms.ids import MessageId
from tms.lag import GAUGE_COUNT_LIMIT, lags
from tms.model import StoreRequest, TopicId
from tms.positions import change_key
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.store.tables import Tables
from tms.subscription import (
    EARLIEST,
    Lag,
    PayloadFilter,
    Preferences,
    Start,
    SubscriptionId,
    after,
    after_entry,
)
from txn import InProcessTxClient, TransactionManager, TxConfig
from txn.errors import TransactionConflictError
from txn.transaction import Transaction

T = TopicId("ns", "t")
TX = Preferences(transactional=True)


@dataclass
class Core:
    svc: MessagingService
    tx: InProcessTxClient
    manager: TransactionManager
    tables: Tables  # the service's store, for looking at rows

    def publish(self, *payloads: str, wp: int | None = None) -> None:
        self.svc.publish(StoreRequest.of(T, payloads, wp))

    def begin(self) -> Transaction:
        return self.tx.start_short()

    def commit(self, tx: Transaction, *changes: bytes) -> None:
        self.tx.can_commit_or_throw(tx, list(changes))
        self.tx.commit_or_throw(tx)

    def read(
        self, sub: SubscriptionId, tx: Transaction | None = None, limit: int = 1000
    ) -> list[bytes]:
        poll = self.svc.subscriptions.read(sub, transaction=tx, limit=limit)
        return [m.payload for m in poll.messages]


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Core]:
    manager = TransactionManager(TxConfig())
    manager.start()
    client = InProcessTxClient(manager)
    store = LevelDBStore(tmp_path / "db")
    svc = MessagingService(store, TmsConfig(), guard=TransactionStateGuard(client, max_age_s=0))
    svc.create_topic(T)
    yield Core(svc, client, manager, Tables(store))
    svc.close()
    manager.stop()


def sub(name: str = "s") -> SubscriptionId:
    return SubscriptionId(T, name)


PREFIX = keys.topic_prefix(T, 1)


def end_of_topic(core: Core) -> MessageId:
    last = core.tables.messages.last_position(PREFIX)
    assert last is not None
    return after_entry(*last)


# -- where a subscription starts --------------------------------------------------------------


def test_each_start_is_resolved_when_the_subscription_is_made(core: Core) -> None:
    core.publish("a", "b")
    subs = core.svc.subscriptions
    assert subs.create(sub("e"), Preferences(Start.earliest())).position == EARLIEST
    assert core.read(sub("e")) == [b"a", b"b"]
    latest = subs.create(sub("l"), Preferences(Start.latest()))
    assert core.read(sub("l")) == []
    core.publish("c")
    assert core.read(sub("l")) == [b"c"]
    assert latest.lag is not None and latest.lag.messages == 0
    first_c = core.svc.fetch(T).messages[2].id
    at_id = subs.create(sub("i"), Preferences(Start.at_id(first_c)))
    assert core.read(sub("i")) == [b"c"] and at_id.position == first_c
    subs.create(sub("t"), Preferences(Start.at_time(first_c.publish_ms)))
    assert core.read(sub("t")) == [b"c"]
    future = subs.create(sub("f"), Preferences(Start.at_time(2**62)))
    assert future.position == after_entry(first_c.publish_ms, first_c.seq)  # not past the end
    assert core.read(sub("f")) == []
    with pytest.raises(PositionOutOfRangeError):
        subs.create(sub("x"), Preferences(Start.at_id(MessageId(2**62, 0))))
    assert core.svc.subscriptions.store.read(sub("x")) is None


def test_a_transactional_subscription_starting_latest_stops_before_an_open_transaction(
    core: Core,
) -> None:
    # Given a topic whose last entries are an open transaction's, then a plain message
    core.publish("a")
    open_tx = core.begin()
    core.publish("in tx", wp=open_tx.write_pointer)
    core.publish("after")
    # When a transactional subscription starts at the latest position
    created = core.svc.subscriptions.create(sub(), Preferences(Start.latest(), True))
    # Then it starts at the open transaction's entry, not past it: once that commits,
    # it reads it and what followed
    held_at = core.svc.fetch(T).messages[1].id
    assert created.position == MessageId(held_at.publish_ms, held_at.seq)
    core.commit(open_tx)
    assert core.read(sub(), core.begin()) == [b"in tx", b"after"]
    # while a non-transactional one starts after everything
    assert core.svc.subscriptions.create(sub("plain"), Preferences(Start.latest())).position > (
        created.position
    )


def test_names_topics_and_duplicates(core: Core) -> None:
    subs = core.svc.subscriptions
    subs.create(sub(), Preferences())
    with pytest.raises(SubscriptionExistsError):
        subs.create(sub(), Preferences())
    with pytest.raises(TopicNotFoundError):
        subs.create(SubscriptionId(TopicId("ns", "nope"), "s"), Preferences())
    with pytest.raises(SubscriptionNotFoundError):
        subs.get(sub("other"))
    for bad in ("", "a:b", "a b", "x" * 256):
        with pytest.raises(TmsInvalidArgumentError):
            SubscriptionId(T, bad)


# -- moving the position ----------------------------------------------------------------------


def test_commit_moves_forward_only_and_never_past_the_end(core: Core) -> None:
    core.publish("a", "b", "c")
    subs = core.svc.subscriptions
    created = subs.create(sub(), Preferences())
    poll = subs.read(sub(), limit=2)
    moved = subs.commit(sub(), poll.position, created.version)
    assert moved.version != created.version and core.read(sub()) == [b"c"]
    with pytest.raises(PositionOutOfRangeError):
        subs.commit(sub(), EARLIEST, moved.version)  # backwards
    with pytest.raises(PositionOutOfRangeError):
        subs.commit(sub(), MessageId(2**62, 0), moved.version)  # past the end
    assert subs.get(sub()).version == moved.version
    assert subs.get(sub()).position == poll.position  # unchanged by the refusals


def test_a_stale_version_changes_nothing(core: Core) -> None:
    core.publish("a", "b")
    subs = core.svc.subscriptions
    created = subs.create(sub(), Preferences())
    subs.commit(sub(), subs.read(sub(), limit=1).position, created.version)
    position = subs.get(sub()).position
    for update in (
        lambda: subs.commit(sub(), position, created.version),
        lambda: subs.seek(sub(), Start.earliest(), created.version),
        lambda: subs.update_preferences(sub(), TX, created.version),
        lambda: subs.delete(sub(), created.version),
    ):
        with pytest.raises(BadVersionError):
            update()
    assert subs.get(sub()).position == position and not subs.get(sub()).preferences.transactional


def test_seek_moves_backwards_too(core: Core) -> None:
    core.publish("a", "b")
    subs = core.svc.subscriptions
    created = subs.create(sub(), Preferences(Start.latest()))
    back = subs.seek(sub(), Start.earliest(), created.version)
    assert core.read(sub()) == [b"a", b"b"]
    forward = subs.seek(sub(), Start.latest(), back.version)
    assert core.read(sub()) == []
    with pytest.raises(PositionOutOfRangeError):
        subs.seek(sub(), Start.at_id(MessageId(2**62, 0)), forward.version)


def test_a_transactional_subscriptions_commit_never_passes_an_entry_its_reader_could_not_see(
    core: Core,
) -> None:
    # Given a transactional subscription, and an open transaction's entry between messages
    core.publish("a")
    open_tx = core.begin()
    core.publish("open", wp=open_tx.write_pointer)
    core.publish("b")
    subs = core.svc.subscriptions
    created = subs.create(sub(), TX)
    reader = core.begin()
    poll = subs.read(sub(), transaction=reader)
    assert [m.payload for m in poll.messages] == [b"a"] and poll.held
    # When it commits past the held entry
    with pytest.raises(PositionOutOfRangeError):
        subs.commit(sub(), end_of_topic(core), created.version, reader)
    # (and without saying what it read with, it cannot commit at all)
    with pytest.raises(TmsInvalidArgumentError):
        subs.commit(sub(), poll.position, created.version)
    # Then up to the held entry is fine
    assert subs.commit(sub(), poll.position, created.version, reader).position == poll.position


def test_a_transactional_subscription_is_read_with_a_transaction(core: Core) -> None:
    core.svc.subscriptions.create(sub(), TX)
    with pytest.raises(TmsInvalidArgumentError):
        core.svc.subscriptions.read(sub())


# -- positions in transactions ----------------------------------------------------------------


def test_a_position_in_a_transaction_counts_once_it_commits_and_never_if_it_aborts(
    core: Core,
) -> None:
    core.publish("a", "b", "c")
    subs = core.svc.subscriptions
    version = subs.create(sub(), TX).version
    # Given a transaction that read two messages and wrote its position
    t1 = core.begin()
    poll = subs.read(sub(), transaction=t1, limit=2)
    subs.commit_in_transaction(sub(), poll.position, version, t1)
    # Then nobody else sees it before it commits, itself included when it reads again
    assert subs.get(sub()).position == EARLIEST
    assert core.read(sub(), core.begin()) == [b"a", b"b", b"c"]
    assert core.read(sub(), t1) == [b"c"]  # its own write
    # When it aborts after rolling back, the position never moved
    assert subs.rollback_in_transaction(sub(), [t1.write_pointer]) == 1
    assert subs.rollback_in_transaction(sub(), [t1.write_pointer]) == 0  # idempotent
    core.tx.abort(t1)
    assert core.read(sub(), core.begin()) == [b"a", b"b", b"c"]
    # And a transaction that commits moves it
    t2 = core.begin()
    poll = subs.read(sub(), transaction=t2, limit=2)
    subs.commit_in_transaction(sub(), poll.position, version, t2)
    core.commit(t2, change_key(sub()))
    current = subs.get(sub())
    assert current.position == poll.position and current.committed_by == t2.write_pointer
    assert current.version == version  # a transactional commit is not a record update
    assert core.read(sub(), core.begin()) == [b"c"]


def test_an_invalidated_transactions_position_never_counts(core: Core) -> None:
    core.publish("a", "b")
    subs = core.svc.subscriptions
    version = subs.create(sub(), TX).version
    t1 = core.begin()
    subs.commit_in_transaction(sub(), subs.read(sub(), transaction=t1).position, version, t1)
    core.tx.invalidate(t1.transaction_id)
    assert subs.get(sub()).position == EARLIEST
    assert core.read(sub(), core.begin()) == [b"a", b"b"]
    # and after cleanup removed its row, still not (the invalid id may then be pruned)
    Cleaner(core.svc, core.tx).run_once()
    assert core.tables.positions.rows(PREFIX, "s") == []


def test_writes_and_rollbacks_of_positions_are_checked_against_the_manager(core: Core) -> None:
    core.publish("a")
    subs = core.svc.subscriptions
    version = subs.create(sub(), TX).version
    t1 = core.begin()
    position = subs.read(sub(), transaction=t1).position
    core.commit(t1)
    with pytest.raises(TransactionNotInProgressError):
        subs.commit_in_transaction(sub(), position, version, t1)  # finished: refused
    t2 = core.begin()
    subs.commit_in_transaction(sub(), position, version, t2)
    core.commit(t2)
    with pytest.raises(TransactionNotInProgressError):
        subs.rollback_in_transaction(sub(), [t2.write_pointer])  # never a committed one
    assert subs.get(sub()).position == position


def test_overlapping_transactions_conflict_so_one_range_commits_once(core: Core) -> None:
    core.publish("a", "b")
    subs = core.svc.subscriptions
    version = subs.create(sub(), TX).version
    # Given two transactions that both read the subscription's first message
    t1, t2 = core.begin(), core.begin()
    p1 = subs.read(sub(), transaction=t1, limit=1)
    p2 = subs.read(sub(), transaction=t2, limit=1)
    assert p1.messages == p2.messages
    subs.commit_in_transaction(sub(), p1.position, version, t1)
    subs.commit_in_transaction(sub(), p2.position, version, t2)
    # When both try to commit with the subscription's change key
    core.commit(t1, change_key(sub()))
    with pytest.raises(TransactionConflictError):
        core.commit(t2, change_key(sub()))
    subs.rollback_in_transaction(sub(), [t2.write_pointer])
    core.tx.abort(t2)
    # Then the range was committed once, and the next reader goes on after it
    assert core.read(sub(), core.begin()) == [b"b"]


def test_a_seek_supersedes_positions_written_in_transactions(core: Core) -> None:
    core.publish("a", "b", "c")
    subs = core.svc.subscriptions
    version = subs.create(sub(), TX).version
    t1 = core.begin()
    subs.commit_in_transaction(sub(), subs.read(sub(), transaction=t1).position, version, t1)
    # Given a seek while the transaction is still open
    sought = subs.seek(sub(), Start.earliest(), version)
    # When the transaction commits anyway
    core.commit(t1)
    # Then the seek stands, and a later commit with the old version is refused
    assert subs.get(sub()).position == EARLIEST
    assert core.read(sub(), core.begin()) == [b"a", b"b", b"c"]
    t2 = core.begin()
    with pytest.raises(BadVersionError):
        subs.commit_in_transaction(sub(), subs.read(sub(), transaction=t2).position, version, t2)
    subs.commit_in_transaction(sub(), subs.read(sub(), transaction=t2).position, sought.version, t2)


def test_rows_do_not_pile_up(core: Core) -> None:
    core.publish(*[str(i) for i in range(30)])
    subs = core.svc.subscriptions
    version = subs.create(sub(), TX).version
    for _ in range(15):
        t = core.begin()
        subs.commit_in_transaction(
            sub(), subs.read(sub(), transaction=t, limit=2).position, version, t
        )
        core.commit(t, change_key(sub()))
    rows = core.tables.positions.rows(PREFIX, "s")
    assert len(rows) <= 2
    assert core.read(sub(), core.begin()) == []


# -- topics, generations, lag, filters --------------------------------------------------------


def test_deleting_a_topic_deletes_its_subscriptions(core: Core) -> None:
    core.svc.subscriptions.create(sub(), Preferences())
    core.svc.delete_topic(T)
    core.svc.create_topic(T)
    with pytest.raises(SubscriptionNotFoundError):
        core.svc.subscriptions.get(sub())
    assert core.svc.subscriptions.list(T) == []


def test_a_record_of_an_older_generation_is_reset_to_the_new_ones_start(core: Core) -> None:
    # Given a subscription that read the old generation, and a delete that did not get to
    # delete its record (a crash between the two steps)
    core.publish("old 1", "old 2")
    subs = core.svc.subscriptions
    created = subs.create(sub(), Preferences())
    subs.commit(sub(), subs.read(sub()).position, created.version)
    record = subs.store.read(sub())
    core.svc.delete_topic(T)
    core.svc.create_topic(T)
    assert record is not None
    subs.store.create(sub(), record.data)  # left behind
    core.publish("new")
    # When it is read
    found = subs.get(sub())
    # Then it starts at the new generation's start
    assert found.state.generation == 2 and found.position == EARLIEST
    assert core.read(sub()) == [b"new"]


def test_lag_counts_what_is_left_exactly_then_by_estimate(core: Core) -> None:
    core.publish(*[str(i) for i in range(50)])
    subs = core.svc.subscriptions
    created = subs.create(sub(), Preferences())
    assert created.lag is not None and (created.lag.messages, created.lag.exact) == (50, True)
    subs.commit(sub(), subs.read(sub(), limit=20).position, created.version)
    lag = subs.get(sub()).lag
    assert lag is not None and (lag.messages, lag.exact) == (30, True)
    # A window smaller than the topic: an estimate
    metadata = core.svc.get_topic(T)
    estimated = lags(core.tables, metadata, [EARLIEST], core.svc.now_ms(), count_limit=10)[0]
    assert not estimated.exact and estimated.messages >= 10
    assert [(s.id.name, s.lag) for s in subs.list(T)] == [("s", lag)]


def test_the_lag_gauge(core: Core) -> None:
    core.publish("a", "b")
    core.svc.subscriptions.create(sub(), Preferences())
    labels = {"namespace": "ns", "topic": "t", "subscription": "s"}
    assert core.svc.metrics.value("tms_subscription_lag", labels) == 2


def test_a_filter_delivers_matching_messages_and_moves_past_the_rest(core: Core) -> None:
    core.publish("order:1", "audit:1", "order:2", "audit:2")
    subs = core.svc.subscriptions
    subs.create(sub(), Preferences(filter=PayloadFilter((b"order:",))))
    poll = subs.read(sub())
    assert [m.payload for m in poll.messages] == [b"order:1", b"order:2"]
    assert poll.position == end_of_topic(core)  # past the last, rejected, message too


def _counted(core: Core, position: MessageId) -> int:
    """Messages at or after ``position``, counted by reading the whole topic."""
    everything = core.svc.subscriptions.read(sub("count"), start_from=EARLIEST, limit=10_000)
    return sum(1 for m in everything.messages if m.id >= position)


def test_the_lag_scan_stops_at_the_oldest_position_asked_about(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a topic of 3,000 messages (one transaction's among them) and positions near its end
    for batch in range(30):
        core.publish(*[f"{batch}:{i}" for i in range(100)])
    tx = core.begin()
    core.publish("t1", "t2", "t3", wp=tx.write_pointer)
    core.commit(tx, b"c")
    core.publish("last")
    subs = core.svc.subscriptions
    subs.create(sub("count"), Preferences())
    ids = [m.id for m in subs.read(sub("count"), start_from=EARLIEST, limit=10_000).messages]
    positions = [ids[-1], ids[-3], ids[-4], ids[-50], after(ids[-1])]
    scanned: list[int] = []
    scan_back = core.tables.messages.scan_back

    def counting(prefix: bytes, through: tuple[int, int] | None = None) -> Iterator[Any]:
        for row in scan_back(prefix, through):
            scanned.append(1)
            yield row

    monkeypatch.setattr(core.tables.messages, "scan_back", counting)
    # When their lags are counted
    found = lags(core.tables, core.svc.get_topic(T), positions, core.svc.now_ms())
    # Then each is exact and right, and the scan read only the rows after the oldest
    assert [(lag.messages, lag.exact) for lag in found] == [
        (_counted(core, p), True) for p in positions
    ]
    assert [lag.messages for lag in found] == [1, 3, 4, 50, 0]
    assert len(scanned) < 60  # about 50 rows, not the topic's 3,000


def test_the_lag_gauge_is_exact_near_the_end_and_bounded_behind(core: Core) -> None:
    for batch in range(30):
        core.publish(*[f"{batch}:{i}" for i in range(100)])
    subs = core.svc.subscriptions
    behind = subs.create(sub("behind"), Preferences())
    near = subs.create(sub("near"), Preferences())
    poll = subs.read(sub("near"), start_from=EARLIEST, limit=2_995)
    subs.commit(sub("near"), poll.position, near.version)
    gauge = dict(subs.all_lags())
    assert (gauge[sub("near")].messages, gauge[sub("near")].exact) == (5, True)
    # Behind the gauge's window: an estimate, at least the window's count
    assert not gauge[sub("behind")].exact
    assert gauge[sub("behind")].messages >= GAUGE_COUNT_LIMIT
    # GET counts further back exactly
    assert subs.get(sub("behind")).lag == Lag(3000, True)
    assert behind.lag == Lag(3000, True)
    labels = {"namespace": "ns", "topic": "t", "subscription": "near"}
    assert core.svc.metrics.value("tms_subscription_lag", labels) == 5
