"""What ``tms serve`` runs on: the embedded LevelDB store, or PostgreSQL shared by
several instances, with the cluster's membership and ownership in ZooKeeper."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from tms.cluster.ownership import DEFAULT_BASE, Cluster, connect
from tms.errors import TmsInvalidArgumentError
from tms.store.kv import KeyValueStore

__all__ = ["StoreConfig", "open_store"]


@dataclass(frozen=True)
class StoreConfig:
    data_dir: Path
    store_url: str | None = None
    """postgresql://... (None: LevelDB in ``data_dir``)."""
    zookeeper: str | None = None
    """The ensemble's ``host:port,...`` (None: no cluster)."""
    zk_path: str = DEFAULT_BASE
    name: str | None = None
    """This instance's id (default ``<host>-<pid>``)."""
    session_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.zookeeper and not self.store_url:
            raise TmsInvalidArgumentError("--zookeeper needs a shared --store postgresql://...")
        if self.store_url and not self.store_url.startswith(("postgresql://", "postgres://")):
            raise TmsInvalidArgumentError("--store: not a postgresql:// URL")

    @property
    def where(self) -> str:
        """The store, for messages (no password)."""
        if self.store_url is None:
            return str(self.data_dir)
        from tms.store.postgres.connections import redact  # noqa: PLC0415

        return redact(self.store_url)


def open_store(config: StoreConfig) -> tuple[KeyValueStore, Cluster | None]:
    """The store, and the cluster membership (not started) when there is one."""
    if config.store_url is None:
        from tms.store.leveldb import LevelDBStore  # noqa: PLC0415

        return LevelDBStore(config.data_dir), None
    from tms.store.postgres import PostgresStore  # noqa: PLC0415

    name = config.name or f"{socket.gethostname()}-{os.getpid()}"
    store = PostgresStore(config.store_url, name=f"tms-{name}")
    if not config.zookeeper:
        return store, None
    try:
        client = connect(config.zookeeper, config.session_timeout_s)
    except BaseException:
        store.close()
        raise
    cluster = Cluster(
        client, store, name, base=config.zk_path, session_timeout_s=config.session_timeout_s
    )
    return store, cluster
