"""Topic ownership on real engines (ZooKeeper ensemble, PostgreSQL): two service
instances in this process, each with its own ZooKeeper session, on one database."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kazoo.client import KazooClient

from tests.fakes import FakeClock
from tms.cluster.ownership import Cluster, connect
from tms.config import TmsConfig
from tms.errors import FencedError, NotOwnerError, StorageUnavailableError
from tms.fetcher import FetchRequest
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.postgres import PostgresStore
from txms_testing import ZooKeeperEnsemble

T = TopicId("ns", "orders")
NOW = 1_700_000_000_000
_bases = itertools.count(1)


@dataclass
class Node:
    service: MessagingService
    cluster: Cluster
    clock: FakeClock


@pytest.fixture
def nodes(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[list[Node]]:
    base = f"/ownership{next(_bases)}/tms"
    made: list[Node] = []

    def node(name: str, clock_ms: int) -> Node:
        store = PostgresStore(pg_url, name=name, shared=True)
        cluster = Cluster(connect(zk_ensemble.connect_string, 10.0), store, name, base=base)
        cluster.start(f"http://{name}.invalid:1")
        clock = FakeClock(clock_ms)
        service = MessagingService(
            store, TmsConfig(tx_max_lifetime_s=10**10), clock=clock, ownership=cluster
        )
        made.append(Node(service, cluster, clock))
        return made[-1]

    # b's clock is an hour behind a's
    node("a", NOW)
    node("b", NOW - 3_600_000)
    yield made
    for n in made:
        n.cluster.close()
        n.service.close()


def publish(node: Node, *payloads: bytes) -> None:
    node.service.publish(StoreRequest(T, list(payloads)))


def ids_and_payloads(node: Node) -> list[tuple[bytes, bytes]]:
    return [(m[0], m[1]) for m in node.service.fetch(T, FetchRequest()).messages]


def _drop_session_node(zk: KazooClient, cluster: Cluster) -> None:
    """What ZooKeeper does when the owner's session expires: its ephemeral node goes."""
    zk.delete(f"{cluster.owners_path}/ns.orders")


def test_one_owner_writes_and_the_other_is_sent_to_it(nodes: list[Node]) -> None:
    a, b = nodes
    a.service.create_topic(T)  # a claims the topic
    publish(a, b"1")
    with pytest.raises(NotOwnerError) as refused:
        publish(b, b"2")
    assert refused.value.owner_url == "http://a.invalid:1"
    with pytest.raises(NotOwnerError):
        b.service.delete_topic(T)
    # reads are served by any instance
    assert [p for _i, p in ids_and_payloads(b)] == [b"1"]
    assert b.cluster.owners() == {"ns.orders": "a"}
    assert [i.id for i in a.cluster.instances()] == ["a", "b"]


def test_a_deposed_owner_cannot_write_and_the_new_one_resumes_above_it(
    nodes: list[Node], zk_ensemble: ZooKeeperEnsemble
) -> None:
    # Given a owning the topic, with messages stored under its clock
    a, b = nodes
    a.service.create_topic(T)
    publish(a, b"a1", b"a2")
    # When a's ownership ends in ZooKeeper (as when its session expires) while a still
    # believes it owns the topic, and b, whose clock is an hour behind, takes it over
    admin = connect(zk_ensemble.connect_string, 10.0)
    try:
        _drop_session_node(admin, a.cluster)
    finally:
        admin.stop()
        admin.close()
    assert a.cluster.owned() == [T]
    publish(b, b"b1")
    # Then a's next write is refused by the store and stores nothing
    with pytest.raises(FencedError):
        publish(a, b"stale")
    assert isinstance(FencedError("x"), StorageUnavailableError)  # 503: retryable
    # and a gave the topic up: its writes now go to b
    assert a.cluster.owned() == []
    with pytest.raises(NotOwnerError):
        publish(a, b"again")
    # b's ids continue above a's, whatever b's clock says, in one order
    publish(b, b"b2")
    stored = ids_and_payloads(a)
    assert [p for _i, p in stored] == [b"a1", b"a2", b"b1", b"b2"]
    ids = [i for i, _p in stored]
    assert ids == sorted(ids) and len(set(ids)) == 4
