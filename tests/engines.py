"""pytest fixtures over ``txms_testing``: one ZooKeeper ensemble and one PostgreSQL
cluster per test session (started on first use, stopped at the end), and a fresh
database per test.

A test that needs an engine whose Debian package is not installed is skipped (say
``make system-deps``); an engine that is installed but fails to start is an error.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator

import pytest

from txms_testing import EngineUnavailableError, PostgresCluster, ZooKeeperEnsemble

__all__ = ["pg_cluster", "pg_url", "zk_ensemble"]

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    try:
        cluster.start()
    except EngineUnavailableError as exc:
        pytest.skip(f"{exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PostgresCluster) -> str:
    """The URL of a new, empty database in the session's cluster."""
    return pg_cluster.create_database(f"t{next(_databases)}")


@pytest.fixture(scope="session")
def zk_ensemble() -> Iterator[ZooKeeperEnsemble]:
    with tempfile.TemporaryDirectory(prefix="txms-zk-") as root:
        ensemble = ZooKeeperEnsemble(root)
        try:
            ensemble.start()
        except EngineUnavailableError as exc:
            pytest.skip(f"{exc}")
        try:
            yield ensemble
        finally:
            ensemble.stop()
