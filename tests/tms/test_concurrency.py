"""Ordering under concurrency: many publishers and consumers on one topic.

Publishers publish plain messages and transactional ones (some committed, some aborted
and rolled back) through a real transaction manager. Consumers follow the topic from the
start, each read with a fresh transaction (or none), resuming after the last id they
saw. Afterwards:

* every transactional consumer saw the same sequence, and so did every non-transactional
  one;
* each sequence's ids strictly increase;
* nothing appeared behind a consumer's cursor: a full read at the end returns exactly
  what each consumer saw, no entry more.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tms.fetcher import FetchRequest
from tms.ids import MessageId
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from txn.config import TxConfig
from txn.inmemory import InProcessTxClient
from txn.manager import TransactionManager

T = TopicId("ns", "busy")
PUBLISHERS, ROUNDS = 6, 40


@pytest.fixture
def system(tmp_path: Path) -> Iterator[tuple[MessagingService, InProcessTxClient]]:
    manager = TransactionManager(TxConfig(cleanup_interval_s=0, snapshot_interval_s=0))
    manager.start()
    svc = MessagingService(LevelDBStore(tmp_path / "db"))
    svc.create_topic(T)
    yield svc, InProcessTxClient(manager)
    svc.close()
    manager.stop()


def test_every_consumer_sees_one_order(system: tuple[MessagingService, InProcessTxClient]) -> None:
    svc, client = system
    done = threading.Event()
    errors: list[BaseException] = []

    def publisher(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(ROUNDS):
                kind = rng.choice(["plain", "commit", "abort", "marker"])
                tag = kind[0]  # p(lain), c(ommit), a(bort), m(arker): the payload's first byte
                if kind == "plain":
                    count = rng.randint(1, 5)
                    svc.publish(StoreRequest.of(T, [f"p{n}-{i}-{j}" for j in range(count)]))
                    continue
                tx = client.start_short()
                batch = [f"{tag}{n}-{i}-{j}" for j in range(3)]
                if kind == "marker":
                    svc.store(StoreRequest.of(T, batch, tx.write_pointer))
                    detail = svc.publish(StoreRequest.of(T, [], tx.write_pointer))
                else:
                    detail = svc.publish(StoreRequest.of(T, batch, tx.write_pointer))
                if kind == "abort":
                    assert detail is not None
                    svc.rollback(T, detail)
                    client.abort(tx)
                else:
                    client.commit_or_throw(tx)
        except BaseException as exc:
            errors.append(exc)

    def consumer(transactional: bool, seen: list[MessageId], payloads: list[bytes]) -> None:
        cursor: MessageId | None = None
        try:
            while True:
                finished = done.is_set()
                tx = client.start_short() if transactional else None
                request = FetchRequest(
                    start_id=cursor, inclusive=cursor is None, transaction=tx, limit=50
                )
                result = svc.fetch(T, request)
                if tx is not None:
                    client.abort(tx)
                for message in result.messages:
                    seen.append(message.id)
                    payloads.append(message.payload)
                if result.messages:
                    cursor = result.messages[-1].id
                elif finished and not result.held:
                    return
        except BaseException as exc:
            errors.append(exc)

    consumers = []
    for transactional in (True, True, False, False):
        ids: list[MessageId] = []
        data: list[bytes] = []
        thread = threading.Thread(target=consumer, args=(transactional, ids, data))
        consumers.append((transactional, ids, data, thread))
        thread.start()
    publishers = [threading.Thread(target=publisher, args=(n,)) for n in range(PUBLISHERS)]
    for t in publishers:
        t.start()
    for t in publishers:
        t.join()
    done.set()
    for _, _, _, thread in consumers:
        thread.join(60)
    assert not errors

    final_tx = client.start_short()
    everything = {
        True: svc.fetch(T, FetchRequest(transaction=final_tx)).messages,
        False: svc.fetch(T).messages,
    }
    client.abort(final_tx)
    for transactional, ids, data, _ in consumers:
        assert ids == sorted(set(ids)), "ids must strictly increase"
        full = everything[transactional]
        assert ids == [m.id for m in full], "an entry appeared behind a consumer's cursor"
        assert data == [m.payload for m in full]
    # Transactional consumers see exactly the committed and plain messages; the others
    # see the aborted (rolled-back) ones too, in the same relative order.
    seen_tx = [m.payload for m in everything[True]]
    seen_all = [m.payload for m in everything[False]]
    assert seen_tx == [p for p in seen_all if not p.startswith(b"a")]
    assert any(p.startswith(b"a") for p in seen_all)
    assert {p[:1] for p in seen_tx} == {b"p", b"c", b"m"}
