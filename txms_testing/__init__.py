"""Throwaway engines on loopback, for tests, benchmarks and a local cluster to try.

Our services as child processes for fault injection (``ServiceProcess``). A 3-node
ZooKeeper ensemble (``ZooKeeperEnsemble``: Debian's ``zookeeper`` package, one
``QuorumPeerMain`` JVM per node) and a PostgreSQL cluster (``PostgresCluster``: Debian's
``postgresql``, ``initdb`` + ``pg_ctl``), each in a temporary directory of its own,
listening on 127.0.0.1 only, started and stopped by the caller. Nothing here touches a
system-wide service, its configuration or its data.

Why an installed package and not a module under ``tests/``: the same engines serve the
test suite (``tests/engines.py`` wraps them in pytest fixtures), the benchmarks, and a
``make run-cluster`` that starts a whole topology for a person to try; those import the
installed code, never the test tree. It imports neither ``txn`` nor ``tms``.

Errors::

    EngineError                 an engine failed to start, answer or stop
     └── EngineUnavailableError its Debian package is not installed (tests skip on this)
"""

from __future__ import annotations

from txms_testing.errors import EngineError, EngineUnavailableError
from txms_testing.ports import free_port, free_ports
from txms_testing.postgres import PostgresCluster
from txms_testing.processes import ServiceProcess, txn_command
from txms_testing.zookeeper import ZooKeeperEnsemble, ZooKeeperNode

__all__ = [
    "EngineError",
    "EngineUnavailableError",
    "PostgresCluster",
    "ServiceProcess",
    "ZooKeeperEnsemble",
    "ZooKeeperNode",
    "free_port",
    "free_ports",
    "txn_command",
]
