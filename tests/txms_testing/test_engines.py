"""The engines the harness starts behave as real ones: the ensemble survives a node's
death and takes it back; the PostgreSQL cluster runs with durable commits."""

from __future__ import annotations

import psycopg

from txms_testing import PostgresCluster, ZooKeeperEnsemble, free_ports


def test_distinct_free_ports() -> None:
    ports = free_ports(9)
    assert len(set(ports)) == 9


def test_the_ensemble_keeps_its_quorum_when_a_node_dies(zk_ensemble: ZooKeeperEnsemble) -> None:
    assert sorted(node.mode() or "" for node in zk_ensemble.nodes) == [
        "follower",
        "follower",
        "leader",
    ]
    victim = zk_ensemble.nodes[0]
    victim.kill()
    zk_ensemble.wait_for_quorum(60)  # the two others serve
    assert victim.mode() is None
    zk_ensemble.restart(victim)
    zk_ensemble.wait_for_quorum(60)
    assert victim.mode() in ("leader", "follower")


def test_postgres_commits_are_durable(pg_cluster: PostgresCluster, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
    assert str(pg_cluster.socket_dir).startswith(str(pg_cluster.dir))
