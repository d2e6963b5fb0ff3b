"""CDAP's DataCleanupTest and testInvalidTx, and cleanup as a pruning participant of a
real transaction manager (it reports; only the manager's pruning truncates)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.fakes import FakeClock
from tests.tms.helpers import payloads, pruning_manager
from tms.cleanup import Cleaner
from tms.codec import keys
from tms.config import TmsConfig
from tms.errors import TransactionServiceError, TransactionTooOldError
from tms.fetcher import FetchRequest
from tms.model import MarkersRequest, StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.tables import Tables, is_older_generation
from txn.config import TxConfig
from txn.inmemory import InProcessTxClient, manager_pruner
from txn.manager import TransactionManager

T1 = TopicId("ns", "t1")
NOW = 1_700_000_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def svc(kv: KeyValueStore, clock: FakeClock) -> Iterator[MessagingService]:
    service = MessagingService(
        kv, TmsConfig(tx_max_lifetime_s=60, cleanup_batch_rows=3), clock=clock
    )
    yield service
    service.close()


def rows(tables: Tables) -> tuple[int, int]:
    """Message and payload rows of every generation of T1 (the service's store)."""
    prefix = keys.topic_name_prefix(T1)
    stop = keys.stop_key_for_prefix(prefix)
    messages = sum(1 for _ in tables.messages.store.scan(prefix, stop))
    stored = sum(1 for _ in tables.payloads.store.scan(prefix, stop))
    return messages, stored


def test_generations_rule() -> None:
    assert [is_older_generation(d, c) for d, c in ((3, 5), (3, -3), (6, 5), (6, 6), (6, -5))] == [
        True,
        True,
        False,
        False,
        False,
    ]


def test_ttl_cleanup_of_both_tables(
    tables: Tables, svc: MessagingService, clock: FakeClock
) -> None:
    svc.create_topic(T1, {"ttl": "3"})
    wp = NOW * 1_000_000
    svc.store(StoreRequest.of(T1, ["p"], tx_write_pointer=wp))
    svc.publish(StoreRequest.of(T1, [], tx_write_pointer=wp))
    for i in range(10):
        svc.publish(StoreRequest.of(T1, [f"m{i}"], tx_write_pointer=wp))
    cleaner = Cleaner(svc)
    assert cleaner.run_once().deleted_expired == 0
    assert rows(tables) == (11, 2)  # payload row + the marker's seal
    clock.advance(3_001)
    report = cleaner.run_once()
    assert report.deleted_expired == 13 and rows(tables) == (0, 0)


def test_ttl_cleanup_stops_at_live_rows(svc: MessagingService, clock: FakeClock) -> None:
    svc.create_topic(T1, {"ttl": "3"})
    svc.publish(StoreRequest.of(T1, ["old1", "old2"]))
    clock.advance(2_000)
    svc.publish(StoreRequest.of(T1, ["new"]))
    clock.advance(1_500)
    assert Cleaner(svc).run_once().deleted_expired == 2
    assert payloads(svc.fetch(T1).messages) == [b"new"]


def test_old_generation_cleanup(tables: Tables, svc: MessagingService) -> None:
    svc.create_topic(T1, {"ttl": "100000"})
    wp = NOW * 1_000_000
    svc.publish(StoreRequest.of(T1, ["data"], tx_write_pointer=wp))
    svc.store(StoreRequest.of(T1, ["stored"], tx_write_pointer=wp))
    assert Cleaner(svc).run_once().deleted_old_generation == 0
    svc.delete_topic(T1)
    svc.create_topic(T1)  # generation 2
    assert Cleaner(svc).run_once().deleted_old_generation == 2
    assert rows(tables) == (0, 0)
    assert svc.fetch(T1).messages == []


def test_deleted_topic_data_is_removed(svc: MessagingService) -> None:
    svc.create_topic(T1)
    svc.publish(StoreRequest.of(T1, ["a", "b"]))
    svc.delete_topic(T1)
    assert Cleaner(svc).run_once().deleted_old_generation == 2


@pytest.fixture
def manager(clock: FakeClock) -> Iterator[TransactionManager]:
    m = pruning_manager(clock)
    yield m
    m.stop()


def test_invalid_transactions_are_negated_reported_and_pruned_by_the_manager(
    kv: KeyValueStore, clock: FakeClock, manager: TransactionManager
) -> None:
    svc = MessagingService(kv, TmsConfig(tx_max_lifetime_s=60), clock=clock)
    pruner = manager_pruner(manager)
    client = InProcessTxClient(manager, pruner=pruner)
    svc.create_topic(T1)
    # Given a transaction that published and was then invalidated
    bad = client.start_short()
    svc.publish(StoreRequest.of(T1, ["bad"], tx_write_pointer=bad.write_pointer))
    client.invalidate(bad.transaction_id)
    good = client.start_short()
    svc.publish(StoreRequest.of(T1, ["good"], tx_write_pointer=good.write_pointer))
    client.commit_or_throw(good)
    reader = client.start_short()
    assert payloads(svc.fetch(T1, FetchRequest(transaction=reader)).messages) == [b"good"]
    cleaner = Cleaner(svc, client, grace_s=10, participant="tms")

    # When cleanup runs before the invalid transaction has outlived its lifetime
    report = cleaner.run_once()
    assert report.negated_invalid == 1 and report.reported
    assert report.prune_upper_bound < bad.transaction_id  # too young: it could still write
    assert pruner.run_once() == []
    assert manager.invalid_size() == 1

    # Then, once it is older than lifetime + grace, cleanup reports it clean and the
    # manager's pruning truncates it
    clock.advance(71_000)
    with pytest.raises(TransactionTooOldError):
        svc.publish(StoreRequest.of(T1, ["zombie"], tx_write_pointer=bad.write_pointer))
    report = cleaner.run_once()
    assert report.prune_upper_bound >= bad.transaction_id
    assert manager.invalid_size() == 1  # cleanup never truncates on its own
    assert pruner.run_once() == [bad.transaction_id]
    assert manager.invalid_size() == 0
    # and the negated entry stays invisible to transactional readers, visible to others
    reader = client.start_short()
    assert payloads(svc.fetch(T1, FetchRequest(transaction=reader)).messages) == [b"good"]
    assert payloads(svc.fetch(T1).messages) == [b"bad", b"good"]
    assert cleaner.fetch_prune_upper_bound(clock.now_ms(), 2**62) == report.prune_upper_bound
    svc.close()


def test_nothing_is_pruned_below_an_in_progress_transaction(
    kv: KeyValueStore, clock: FakeClock, manager: TransactionManager
) -> None:
    svc = MessagingService(kv, TmsConfig(tx_max_lifetime_s=60), clock=clock)
    client = InProcessTxClient(manager)
    svc.create_topic(T1)
    long_running = client.start_long()
    invalid = client.start_short()
    client.invalidate(invalid.transaction_id)
    clock.advance(200_000)
    cleaner = Cleaner(svc, client, grace_s=0)
    report = cleaner.run_once()
    assert report.prune_upper_bound < long_running.transaction_id
    # The cleaner as an in-process plugin of the manager's pruning
    pruner = manager_pruner(manager, [cleaner])
    pruner.reported.report("tms", 2**62)
    assert pruner.run_once() == []
    assert manager.invalid_size() == 1
    svc.close()


def test_cleanup_alone_truncates_nothing(
    kv: KeyValueStore, clock: FakeClock, manager: TransactionManager
) -> None:
    svc = MessagingService(kv, dataclasses.replace(TmsConfig(), tx_max_lifetime_s=60), clock=clock)
    client = InProcessTxClient(manager)
    svc.create_topic(T1)
    invalid = client.start_short()
    client.invalidate(invalid.transaction_id)
    clock.advance(200_000)
    report = Cleaner(svc, client, grace_s=0).run_once()
    assert report.prune_upper_bound >= invalid.transaction_id and not report.reported
    assert manager.invalid_size() == 1
    svc.close()


def test_a_failed_report_fails_the_run(kv: KeyValueStore, clock: FakeClock) -> None:
    manager = TransactionManager(TxConfig(cleanup_interval_s=0, snapshot_interval_s=0), clock=clock)
    manager.start()
    svc = MessagingService(kv, TmsConfig(tx_max_lifetime_s=60), clock=clock)
    try:
        client = InProcessTxClient(manager)  # a server that does not prune
        with pytest.raises(TransactionServiceError, match="cannot report its prune bound"):
            Cleaner(svc, client, grace_s=0, participant="tms").run_once()
    finally:
        svc.close()
        manager.stop()


def test_cleanup_loop_runs_in_the_background(
    tables: Tables, svc: MessagingService, clock: FakeClock
) -> None:
    import time

    from tms.cleanup import CleanupLoop

    svc.create_topic(T1, {"ttl": "1"})
    svc.publish(StoreRequest.of(T1, ["old"]))
    clock.advance(2_000)
    loop = CleanupLoop(Cleaner(svc), interval_s=0.02)
    loop.start()
    deadline = time.monotonic() + 60  # generous: a loaded machine may be slow to run it
    # judged by what is left, not by the latest report: a second, empty run may replace
    # the first one's report before this thread looks
    while (loop.last_report is None or rows(tables) != (0, 0)) and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.stop()
    assert loop.last_report is not None
    assert rows(tables) == (0, 0)


def test_idempotency_rows_expire_and_go_with_their_generation(
    tables: Tables, svc: MessagingService, clock: FakeClock
) -> None:
    def keyed() -> int:
        prefix = keys.topic_name_prefix(T1)
        return sum(
            1 for _ in tables.idempotency.store.scan(prefix, keys.stop_key_for_prefix(prefix))
        )

    svc.create_topic(T1, {"ttl": "3"})
    wp = NOW * 1_000_000
    svc.publish_markers(MarkersRequest(T1, (wp,), "early"))
    clock.advance(2_000)
    svc.publish_markers(MarkersRequest(T1, (wp + 1,), "late"))
    cleaner = Cleaner(svc)
    cleaner.run_once()
    assert keyed() == 2
    clock.advance(1_500)  # "early" is 3.5 s old, past the 3 s TTL; "late" 1.5 s
    assert cleaner.run_once().deleted_expired >= 1
    assert keyed() == 1
    assert svc.publish_markers(MarkersRequest(T1, (wp + 1,), "late")).duplicate
    svc.delete_topic(T1)
    svc.create_topic(T1)
    assert not svc.publish_markers(MarkersRequest(T1, (wp + 2,), "late")).duplicate
    assert cleaner.run_once().deleted_old_generation >= 1
    assert keyed() == 1  # the new generation's row
