"""The invalid-list prune bound with several instances (real ZooKeeper ensemble and
PostgreSQL; two service instances in this process, one transaction manager): every
instance reports its cleanup's bound under the one participant name, so the manager
prunes by whichever report came last. That is safe because each instance's cleanup
covers the whole shared store — it negates invalid entries of every topic, owned by it
or not, and keeps its bound below queue work pending in any queue, which only the
queue's owner settles (docs/operations.md, "The prune bound of a cluster"). The test
pins that: the report of an instance that owns nothing never lets the manager prune a
transaction whose entries or pending work are still in the store."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.fakes import FakeClock
from tests.tms.cluster.nodes import start_node, stop_nodes
from tests.tms.helpers import pruning_manager
from tms.cleanup import Cleaner
from tms.config import TmsConfig
from tms.fetcher import FetchRequest
from tms.guard import TransactionStateGuard
from tms.model import StoreRequest, TopicId
from tms.queues import EnqueueItem, EnqueueRequest, ReceiveRequest
from tms.service import MessagingService
from txms_testing import ZooKeeperEnsemble
from txn import InProcessTxClient, TransactionManager
from txn.inmemory import manager_pruner
from txn.prune import TransactionPruner

T = TopicId("ns", "orders")
Q = TopicId("ns", "jobs")
NOW = 1_700_000_000_000
_bases = itertools.count(1)


@dataclass
class Deployment:
    a: MessagingService
    b: MessagingService
    tx: InProcessTxClient
    pruner: TransactionPruner
    manager: TransactionManager
    clock: FakeClock

    def cleaner(self, service: MessagingService) -> Cleaner:
        return Cleaner(service, self.tx, grace_s=10, participant="tms")


@pytest.fixture
def deployment(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[Deployment]:
    base = f"/prunebound{next(_bases)}/tms"
    clock = FakeClock(NOW)
    manager = pruning_manager(clock)
    pruner = manager_pruner(manager)
    tx = InProcessTxClient(manager, pruner=pruner)
    nodes = [
        start_node(
            zk_ensemble,
            pg_url,
            name,
            base,
            config=TmsConfig(tx_max_lifetime_s=60),
            clock=clock,
            guard=TransactionStateGuard(tx, max_age_s=0),
        )
        for name in ("a", "b")
    ]
    yield Deployment(nodes[0].service, nodes[1].service, tx, pruner, manager, clock)
    stop_nodes(nodes)
    manager.stop()


def visible(service: MessagingService, tx: InProcessTxClient) -> list[bytes]:
    reader = tx.start_short()
    try:
        return [m[1] for m in service.fetch(T, FetchRequest(transaction=reader)).messages]
    finally:
        tx.abort(reader)


def test_the_bound_of_an_instance_that_owns_nothing_is_safe_for_the_whole_store(
    deployment: Deployment,
) -> None:
    d = deployment
    a, b, tx = d.a, d.b, d.tx
    # Given a topic and a queue owned by b; a transaction that published to the topic
    # and another that enqueued to the queue, both invalidated
    b.create_topic(T)
    b.create_topic(Q, {"kind": "queue"})
    published = tx.start_short()
    b.publish(StoreRequest.of(T, ["invalid"], tx_write_pointer=published.write_pointer))
    enqueued = tx.start_short()
    b.enqueue(EnqueueRequest(Q, [EnqueueItem(b"invalid")], enqueued.write_pointer))
    tx.invalidate(published.transaction_id)
    tx.invalidate(enqueued.transaction_id)
    good = tx.start_short()
    b.publish(StoreRequest.of(T, ["good"], tx_write_pointer=good.write_pointer))
    tx.commit_or_throw(good)
    d.clock.advance(71_000)  # both can no longer write
    # When a, which owns neither, runs its cleanup and reports its bound
    report = d.cleaner(a).run_once()
    # Then it negated the entry in b's topic, and its bound stays below the work still
    # pending in b's queue (only b may settle it)
    assert report.negated_invalid == 1 and report.reported
    assert published.transaction_id <= report.prune_upper_bound < enqueued.transaction_id
    assert d.pruner.run_once() == [published.transaction_id]
    # and once pruned, the published entry is still hidden from transactional readers
    assert visible(a, tx) == visible(b, tx) == [b"good"]
    # When b drops the invalid transaction's pending work (its housekeeping: a receive,
    # or its cleanup) and a reports last
    assert b.receive(ReceiveRequest(Q, 10)).messages == ()
    assert d.cleaner(b).run_once().prune_upper_bound >= enqueued.transaction_id
    assert d.cleaner(a).run_once().prune_upper_bound >= enqueued.transaction_id
    # Then the manager prunes it, and the enqueue never became deliverable
    assert d.pruner.run_once() == [enqueued.transaction_id]
    assert d.manager.invalid_size() == 0
    assert b.receive(ReceiveRequest(Q, 10)).messages == ()
    stats = b.queue_stats(Q)
    assert (stats.pending, stats.ready) == (0, 0)
    assert visible(a, tx) == [b"good"]
