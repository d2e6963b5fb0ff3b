"""Service instances of one cluster in this process, for the tests of this package: each
with its own ZooKeeper session and PostgreSQL connection, on one database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tms.cluster.ownership import Cluster, connect
from tms.service import MessagingService
from tms.store.postgres import PostgresStore
from txms_testing import ZooKeeperEnsemble


@dataclass
class Node:
    service: MessagingService
    cluster: Cluster


def start_node(
    zk: ZooKeeperEnsemble, pg_url: str, name: str, base: str, **service_args: Any
) -> Node:
    """Instance ``name`` registered under ``base``; ``service_args`` go to its
    ``MessagingService`` (its ownership is the instance's ``Cluster``)."""
    store = PostgresStore(pg_url, name=name, shared=True)
    cluster = Cluster(connect(zk.connect_string, 10.0), store, name, base=base)
    cluster.start(f"http://{name}.invalid:1")
    return Node(MessagingService(store, ownership=cluster, **service_args), cluster)


def stop_nodes(nodes: list[Node]) -> None:
    for node in nodes:
        node.cluster.close()
        node.service.close()
