"""ZooKeeper URLs and the leader node's contents (pure), and discovery on a real
ensemble."""

from __future__ import annotations

import pytest

from txms_testing import ZooKeeperEnsemble
from txn.errors import InvalidArgumentError, TxServiceUnavailableError
from txn.ha.discovery import ZooKeeperLeader
from txn.ha.zk import DEFAULT_BASE, ZkTarget, parse_leader, session
from txn.rpc.endpoints import AddressList, endpoints


def test_zk_urls() -> None:
    target = ZkTarget.from_url("zk://a:1,b:2/svc/txn")
    assert (target.hosts, target.base) == ("a:1,b:2", "/svc/txn")
    assert target.leader_path == "/svc/txn/leader"
    assert target.election_path == "/svc/txn/election"
    assert ZkTarget.from_url("zk://a:1").base == DEFAULT_BASE
    assert ZkTarget.from_url("zk://a:1/").base == DEFAULT_BASE
    assert ZkTarget.from_url(target.url) == target


@pytest.mark.parametrize("bad", ["http://a:1/x", "zk:///x", "zk://a:1,,b:2/x"])
def test_bad_zk_urls(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        ZkTarget.from_url(bad)


def test_bad_base_paths() -> None:
    for base in ("relative", "/trailing/", "/a//b"):
        with pytest.raises(InvalidArgumentError):
            ZkTarget("a:1", base)


def test_leader_node_contents() -> None:
    assert parse_leader(b"10.0.0.5:15165") == ("10.0.0.5", 15165)
    assert parse_leader(b"host:port") is None
    assert parse_leader(b"") is None


def test_endpoint_specs() -> None:
    assert isinstance(endpoints("h:1"), AddressList)
    assert endpoints("h:1,g:2").describe() == "h:1,g:2"
    assert endpoints(("h", 1)).describe() == "h:1"
    assert endpoints(["h:1", ("g", 2)]).describe() == "h:1,g:2"
    with pytest.raises(InvalidArgumentError):
        AddressList([])


def test_discovery_follows_the_leader_node(zk_ensemble: ZooKeeperEnsemble) -> None:
    target = ZkTarget(zk_ensemble.connect_string, "/discovery/txn")
    writer = session(target)
    leader = ZooKeeperLeader(target)
    try:
        # Given no leader published, a caller waits and then gives up
        with pytest.raises(TxServiceUnavailableError):
            leader.current(0.2)
        # When one is published, and then replaced
        writer.create(target.leader_path, b"127.0.0.1:1000", ephemeral=True, makepath=True)
        assert leader.current(5) == ("127.0.0.1", 1000)
        writer.set(target.leader_path, b"127.0.0.1:2000")
        assert leader.pause(("127.0.0.1", 1000), 5) is True
        # Then the new address is current as soon as it is published
        assert leader.current(5) == ("127.0.0.1", 2000)
    finally:
        leader.close()
        writer.stop()
        writer.close()
