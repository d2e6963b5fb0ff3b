"""Subscriptions and queue housekeeping with several instances on real engines
(ZooKeeper ensemble, PostgreSQL): two service instances in this process, each with its
own ZooKeeper session and database connection, the subscription records in ZooKeeper
(``ZkSubscriptionStore``), one transaction manager."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tms.cluster.ownership import Cluster, connect
from tms.config import TmsConfig
from tms.errors import BadVersionError, FencedError, NotOwnerError
from tms.guard import TransactionStateGuard
from tms.ids import MessageId
from tms.model import StoreRequest, TopicId
from tms.positions import change_key
from tms.queues import EnqueueItem, EnqueueRequest, ReceiveRequest
from tms.service import MessagingService
from tms.store.postgres import PostgresStore
from tms.store.zookeeper import ZkSubscriptionStore
from tms.subscription import EARLIEST, Preferences, Start, SubscriptionId, after
from txms_testing import ZooKeeperEnsemble
from txn import InProcessTxClient, TransactionManager, TxConfig
from txn.transaction import Transaction

T = TopicId("ns", "orders")
S = SubscriptionId(T, "s")
_bases = itertools.count(1)


@dataclass
class Node:
    service: MessagingService
    cluster: Cluster


@dataclass
class Deployment:
    a: Node
    b: Node
    tx: InProcessTxClient
    zk: ZooKeeperEnsemble

    def commit(self, tx: Transaction) -> None:
        self.tx.can_commit_or_throw(tx, [change_key(S)])
        self.tx.commit_or_throw(tx)

    def end_ownership_of_a(self, node: str) -> None:
        """What ZooKeeper does when a's session expires: its owner node of ``node``
        goes (a itself is not told)."""
        admin = connect(self.zk.connect_string, 10.0)
        try:
            admin.delete(f"{self.a.cluster.owners_path}/{node}")
        finally:
            admin.stop()
            admin.close()

    def positions(self) -> list[MessageId]:
        """The position after each message of the topic, in order."""
        messages = self.b.service.subscriptions.read(S, limit=10_000).messages
        return [after(m.id) for m in messages]


@pytest.fixture
def deployment(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[Deployment]:
    base = f"/clustersubs{next(_bases)}/tms"
    manager = TransactionManager(TxConfig())
    manager.start()
    tx = InProcessTxClient(manager)
    made: list[Node] = []
    for name in ("a", "b"):
        store = PostgresStore(pg_url, name=name, shared=True)
        cluster = Cluster(connect(zk_ensemble.connect_string, 10.0), store, name, base=base)
        cluster.start(f"http://{name}.invalid:1")
        service = MessagingService(
            store,
            TmsConfig(),
            guard=TransactionStateGuard(tx, max_age_s=0),
            ownership=cluster,
            subscription_store=ZkSubscriptionStore(cluster.client, f"{base}/subscriptions"),
        )
        made.append(Node(service, cluster))
    yield Deployment(made[0], made[1], tx, zk_ensemble)
    for node in made:
        node.cluster.close()
        node.service.close()
    manager.stop()


def test_commits_through_both_instances_lose_no_update(deployment: Deployment) -> None:
    # Given a topic of 81 messages and a subscription at its start, made through a
    a, b = deployment.a.service, deployment.b.service
    a.create_topic(T)
    a.publish(StoreRequest(T, [b"%d" % n for n in range(81)]))
    a.subscriptions.create(S, Preferences(Start.earliest()))
    ps = deployment.positions()
    next_of = {EARLIEST: ps[0], **dict(itertools.pairwise(ps))}
    # When 2 threads on each instance move it one message forward 20 times each, by
    # compare-and-set on the version they read
    seen: list[MessageId] = []

    def bump(service: MessagingService) -> None:
        done = 0
        while done < 20:
            current = service.subscriptions.get(S, lag=False)
            try:
                moved = service.subscriptions.commit(S, next_of[current.position], current.version)
            except BadVersionError:
                continue
            seen.append(moved.position)
            done += 1

    threads = [threading.Thread(target=bump, args=(s,)) for s in (a, b, a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # Then every successful commit moved it by one: none was overwritten by another
    assert len(seen) == 80
    assert sorted(seen) == ps[:80]  # each position committed exactly once
    assert a.subscriptions.get(S).position == ps[79] == b.subscriptions.get(S).position


def test_a_position_written_in_a_transaction_through_the_owner_is_read_at_the_other(
    deployment: Deployment,
) -> None:
    # Given a owning the topic, and a subscription made through b
    a, b = deployment.a.service, deployment.b.service
    a.create_topic(T)
    a.publish(StoreRequest(T, [b"1", b"2", b"3"]))
    version = b.subscriptions.create(S, Preferences(Start.earliest())).version
    ps = deployment.positions()
    # When a transaction writes the position: b is sent to the owner, a writes it
    t1 = deployment.tx.start_short()
    with pytest.raises(NotOwnerError):
        b.subscriptions.commit_in_transaction(S, ps[1], version, t1)
    a.subscriptions.commit_in_transaction(S, ps[1], version, t1)
    assert b.subscriptions.get(S).position == EARLIEST  # not before it commits
    deployment.commit(t1)
    # Then b reads it, committed by that transaction
    seen = b.subscriptions.get(S)
    assert (seen.position, seen.committed_by) == (ps[1], t1.write_pointer)
    assert [m.payload for m in b.subscriptions.read(S).messages] == [b"3"]


def test_a_deposed_owner_cannot_overwrite_a_newer_position(deployment: Deployment) -> None:
    # Given a owning the topic, with a committed transactional position
    a, b = deployment.a.service, deployment.b.service
    a.create_topic(T)
    a.publish(StoreRequest(T, [b"%d" % n for n in range(4)]))
    version = a.subscriptions.create(S, Preferences(Start.earliest())).version
    ps = deployment.positions()
    t1 = deployment.tx.start_short()
    a.subscriptions.commit_in_transaction(S, ps[0], version, t1)
    deployment.commit(t1)
    # and a transaction that read on through a, still running
    stale = deployment.tx.start_short()
    # When a's ownership ends in ZooKeeper (its session expired, as far as the others
    # know) and b takes the topic over and commits a newer position
    deployment.end_ownership_of_a("ns.orders")
    t2 = deployment.tx.start_short()
    b.subscriptions.commit_in_transaction(S, ps[2], version, t2)
    deployment.commit(t2)
    # Then a, which still believes it owns the topic, cannot write the older position
    assert deployment.a.cluster.owned() == [T]
    with pytest.raises(FencedError):
        a.subscriptions.commit_in_transaction(S, ps[1], version, stale)
    deployment.tx.abort(stale)
    # and both instances read the newest one
    for service in (a, b):
        seen = service.subscriptions.get(S)
        assert (seen.position, seen.committed_by) == (ps[2], t2.write_pointer)


def test_queue_housekeeping_and_counts_only_where_the_queue_is_owned(
    deployment: Deployment,
) -> None:
    # Given a queue owned by a, with a message whose lease has run out
    a, b = deployment.a.service, deployment.b.service
    q = TopicId("ns", "jobs")
    a.create_topic(q, {"kind": "queue", "backoff_s": "0"})
    a.enqueue(EnqueueRequest(q, [EnqueueItem(b"job")]))
    assert len(a.receive(ReceiveRequest(q, 1, lease_ms=1)).messages) == 1
    time.sleep(0.05)
    # When b runs its housekeeping and counts its queues (its cleanup, its metrics)
    assert b.maintain_queues() == 0
    assert b.queues_stats() == []
    # Then the queue stayed a's, and a looks after it
    assert deployment.b.cluster.owned() == []
    assert a.maintain_queues() == 1  # the lease that ran out
    assert [t for t, _stats in a.queues_stats()] == [q]
    # and a queue nobody owns any more is taken over by the first instance to look
    deployment.end_ownership_of_a("ns.jobs")
    assert [t for t, stats in b.queues_stats() if stats.ready == 1] == [q]
    assert deployment.b.cluster.owned() == [q]
