"""Dead-letter moves between queues owned by different instances (real ZooKeeper
ensemble and PostgreSQL; two service instances in this process, each with its own
ZooKeeper session): every step is written by its queue's owner — the dead-letter
queue's owner copies, the source's owner removes — whether the owners tell each other
(the change feed) or find the work in their housekeeping; the message is never lost,
never deliverable in both, and copied once."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterator

import pytest

from tests.fakes import FakeClock
from tests.tms.cluster.nodes import Node, start_node, stop_nodes
from tms.config import TmsConfig
from tms.model import TopicId
from tms.queues import AckOutcome, EnqueueItem, EnqueueRequest, NackRequest, ReceiveRequest
from tms.store.postgres.notify import PgChangeFeed
from txms_testing import ZooKeeperEnsemble

Q = TopicId("ns", "jobs")
DLQ = TopicId("ns", "jobs_dead")
NOW = 1_700_000_000_000
_bases = itertools.count(1)


NodeFactory = Callable[[str, bool], Node]


@pytest.fixture
def make_node(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[NodeFactory]:
    base = f"/dead-letters{next(_bases)}/tms"
    made: list[Node] = []

    def node(name: str, feed: bool) -> Node:
        made.append(
            start_node(
                zk_ensemble,
                pg_url,
                name,
                base,
                config=TmsConfig(tx_max_lifetime_s=10**10),
                clock=FakeClock(NOW),
                feed=PgChangeFeed(pg_url, name=f"tms-{name}") if feed else None,
                rng=random.Random(7),
            )
        )
        return made[-1]

    yield node
    stop_nodes(made)


def two_owners(make_node: NodeFactory, feed: bool) -> tuple[Node, Node]:
    """a owns the queue, b its dead-letter queue; one message enqueued."""
    a, b = make_node("a", feed), make_node("b", feed)
    b.service.create_topic(DLQ, {"kind": "queue", "max_attempts": "0"})
    a.service.create_topic(
        Q, {"kind": "queue", "max_attempts": "1", "dead_letter_queue": DLQ.topic}
    )
    a.service.enqueue(EnqueueRequest(Q, [EnqueueItem(b"doomed", key="k-1", priority=2)]))
    return a, b


def kill_last_attempt(a: Node) -> None:
    [m] = a.service.receive(ReceiveRequest(Q, 10)).messages
    assert list(a.service.nack(NackRequest(Q, [m.receipt], 0))) == [AckOutcome.DEAD]


def states(node: Node, topic: TopicId) -> list[str]:
    return [r["state"] for r in node.service.inspect(topic)["messages"]]


def eventually(check: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def test_the_owners_move_a_dead_letter_between_them_when_told(make_node: NodeFactory) -> None:
    # Given a queue owned by a whose dead-letter queue b owns
    a, b = two_owners(make_node, feed=True)
    # When a message fails its last attempt at a
    kill_last_attempt(a)
    # Then b copies it into the dead-letter queue and a removes it from the queue
    eventually(lambda: states(b, DLQ) == ["ready"] and states(b, Q) == [])
    # once, with what it carried, each queue still written by its own owner only
    [moved] = b.service.receive(ReceiveRequest(DLQ, 10)).messages
    assert (moved.payload, moved.key, moved.priority, moved.attempt) == (b"doomed", "k-1", 2, 2)
    assert a.cluster.owners() == {"ns.jobs": "a", "ns.jobs_dead": "b"}
    stats = a.service.queue_stats(Q)
    assert (stats.dead, stats.ready, stats.leased) == (0, 0, 0)


def test_housekeeping_moves_it_when_nobody_was_told(make_node: NodeFactory) -> None:
    # Given the same owners, with no feed to tell each other
    a, b = two_owners(make_node, feed=False)
    kill_last_attempt(a)
    time.sleep(0.5)  # a's own mover tried, and could not copy it
    assert states(a, Q) == ["moving"] and states(a, DLQ) == []
    # When a's housekeeping runs first: it may not copy, so it removes nothing
    a.service.maintain_queues()
    assert states(a, Q) == ["moving"] and states(a, DLQ) == []
    # When b's housekeeping runs (twice: as after a crash before the removal)
    b.service.maintain_queues()
    b.service.maintain_queues()
    # Then the copy is there once, and the original is moving, never deliverable
    assert states(b, DLQ) == ["ready"] and states(b, Q) == ["moving"]
    assert a.service.receive(ReceiveRequest(Q, 10)).messages == ()
    # and a's next housekeeping removes the original
    a.service.maintain_queues()
    assert states(b, Q) == [] and states(b, DLQ) == ["ready"]
    assert a.cluster.owners() == {"ns.jobs": "a", "ns.jobs_dead": "b"}
