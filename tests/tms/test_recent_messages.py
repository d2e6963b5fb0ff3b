"""The table debugger: ``tms.inspect.recent_messages`` lists the newest messages with
their transactional status against a real transaction manager's fresh transaction
(``tms.txwatch``), and pages through commit markers without losing any."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeClock
from tms.config import TmsConfig
from tms.guard import TransactionStateGuard
from tms.ids import MessageId
from tms.inspect import recent_messages
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.store.tables import Tables
from tms.txwatch import TxWatch
from txn import InProcessTxClient, TransactionManager, TxConfig

T = TopicId("ns", "t")


@pytest.fixture
def manager() -> Iterator[TransactionManager]:
    m = TransactionManager(TxConfig())
    m.start()
    yield m
    m.stop()


@pytest.fixture
def store(tmp_path: Path) -> LevelDBStore:
    return LevelDBStore(tmp_path / "db")


@pytest.fixture
def service(store: LevelDBStore) -> Iterator[MessagingService]:
    svc = MessagingService(store, TmsConfig(tx_max_lifetime_s=10**10), clock=FakeClock())
    svc.create_topic(T)
    yield svc
    svc.close()


def test_each_entry_gets_its_status(tmp_path: Path, manager: TransactionManager) -> None:
    # Given a service whose writes the manager checks, and entries of every kind
    service = MessagingService(
        LevelDBStore(tmp_path / "checked"),
        TmsConfig(),
        guard=TransactionStateGuard(InProcessTxClient(manager), max_age_s=0),
    )
    service.create_topic(T)
    service.publish(StoreRequest.of(T, ["plain"]))
    done = manager.start_short()
    service.publish(StoreRequest.of(T, ["committed"], done.write_pointer))
    manager.commit(done.transaction_id, done.write_pointer)
    undone = manager.start_short()
    detail = service.publish(StoreRequest.of(T, ["rolled back"], undone.write_pointer))
    assert detail is not None
    service.rollback(T, detail)
    manager.abort(undone)
    running = manager.start_long()
    service.publish(StoreRequest.of(T, ["running"], running.write_pointer))
    failed = manager.start_short()
    service.publish(StoreRequest.of(T, ["invalid"], failed.write_pointer))
    manager.invalidate(failed.transaction_id)
    watch = TxWatch(InProcessTxClient(manager), where="in process")
    # When the newest are listed against a fresh transaction
    listed = service.recent_messages(T, snapshot=watch.snapshot())["messages"]
    # Then newest first, each with its status
    assert [(m["payload"], m["status"]) for m in listed] == [
        (b"invalid", "invalid"),
        (b"running", "in progress"),
        (b"rolled back", "rolled back"),
        (b"committed", "committed"),
        (b"plain", "plain"),
    ]
    # And without a transaction, transactional entries are unknown
    unjudged = service.recent_messages(T)["messages"]
    assert [m["status"] for m in unjudged] == [
        "unknown",
        "unknown",
        "rolled back",
        "unknown",
        "plain",
    ]
    # And the watch tells the state: one in progress, one invalid
    state = watch.to_json()
    assert (state["inProgress"], state["invalid"], state["lastPrune"]) == (1, 1, None)
    assert len(state["history"]) == 1
    service.close()


def test_pages_through_markers_without_losing_any(service: MessagingService) -> None:
    # Given a plain message, a commit marker of five staged payloads, another plain one
    service.publish(StoreRequest.of(T, [b"m0"]))
    wp = 1_700_000_000_000 * 1_000_000
    service.store(StoreRequest.of(T, [f"p{i}".encode() for i in range(5)], wp))
    service.publish(StoreRequest.of(T, [], wp))
    service.publish(StoreRequest.of(T, [b"m1"]))
    # When read two at a time with the last id as the next page's start
    seen: list[bytes] = []
    before = None
    while True:
        page = service.recent_messages(T, limit=2, before=before)
        seen += [m["payload"] for m in page["messages"]]
        if not page["more"]:
            break
        before = MessageId.from_hex(page["messages"][-1]["id"])
    # Then every message came once, newest first
    assert seen == [b"m1", b"p4", b"p3", b"p2", b"p1", b"p0", b"m0"]


def test_long_payloads_are_cut(service: MessagingService, store: LevelDBStore) -> None:
    service.publish(StoreRequest.of(T, [b"x" * 5000]))
    [message] = recent_messages(Tables(store), service.get_topic(T), preview_bytes=100)["messages"]
    assert (len(message["payload"]), message["size"], message["truncated"]) == (100, 5000, True)
