"""A work queue served by two ``tms serve --zookeeper ... --store postgresql://...``
processes (``tests/engines.py``): its writes reach the owner from either instance, and a
receive's leases outlive an owner killed with -9 (the next owner reads them from the
store)."""

from __future__ import annotations

import time

import requests

from tests.integration.test_ha_tms import TmsCluster, cluster  # noqa: F401 - the fixture
from tms.client import MessagingClient
from tms.errors import TmsTransientError
from tms.model import TopicId
from tms.queues import AckOutcome, QueueMessage

Q = TopicId("ns", "jobs")
PATH = "/v1/namespaces/ns/topics/jobs"


def receive_when_served(
    client: MessagingClient, n: int, timeout_s: float = 60
) -> list[QueueMessage]:
    """A receive, retried while the queue has no owner that answers (its owner died and
    ZooKeeper has not expired its session yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return client.queue(Q).receive(n, lease_s=60)
        except TmsTransientError:
            assert time.monotonic() < deadline, "no instance took the queue over"
            time.sleep(0.2)


def test_leases_outlive_an_owner_killed_mid_lease(cluster: TmsCluster) -> None:  # noqa: F811
    # Given a queue owned by a, with three messages enqueued through b (sent on to a)
    a, url_a = cluster.serve("a")
    _b, url_b = cluster.serve("b")
    with MessagingClient(url_a) as at_a:
        at_a.create_topic(Q, {"kind": "queue", "lease_s": "60", "backoff_s": "0"})
    body = {"messages": [{"payload": "bTE="}, {"payload": "bTI="}, {"payload": "bTM="}]}
    redirected = requests.post(
        f"{url_b}{PATH}/enqueue", json=body, timeout=30, allow_redirects=False
    )
    assert redirected.status_code == 307
    assert redirected.headers["Location"] == f"{url_a}{PATH}/enqueue"
    assert requests.post(f"{url_b}{PATH}/enqueue", json=body, timeout=30).status_code == 200
    with MessagingClient(url_b, retries=6, backoff_s=0.1) as at_b:
        assert requests.get(f"{url_b}/v1/cluster", timeout=30).json()["owners"] == {"ns.jobs": "a"}
        # and two of them leased for a minute by a receive through b
        leased = at_b.queue(Q).receive(2, lease_s=60)
        assert sorted(m.payload for m in leased) == [b"m1", b"m2"]
        # When a is killed -9 mid-lease
        a.kill()
        # Then b takes the queue over and hands out only the message nobody leased
        assert [m.payload for m in receive_when_served(at_b, 3)] == [b"m3"]
        assert requests.get(f"{url_b}/v1/cluster", timeout=30).json()["owners"] == {"ns.jobs": "b"}
        # and the receipts a handed out still finish their messages at b
        first, second = sorted(leased, key=lambda m: m.payload)
        assert at_b.queue(Q).ack([first]) == [AckOutcome.ACKED]
        assert at_b.queue(Q).nack([second], delay_s=0) == [AckOutcome.RETURNED]
        again = at_b.queue(Q).receive(3, lease_s=60)
        assert [(m.payload, m.attempt) for m in again] == [(b"m2", second.attempt + 1)]
        stats = at_b.queue(Q).stats()
        assert (stats.acked, stats.leased, stats.ready) == (1, 2, 0)
