"""What ``tms serve`` runs on: the embedded LevelDB store, or PostgreSQL shared by
several instances, with the cluster's membership, topic ownership and subscription
records in ZooKeeper (``<zk-path>/subscriptions``, ``tms.store.zookeeper``)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from tms.changes import ChangeFeed
from tms.cluster.ownership import DEFAULT_BASE, Cluster, connect
from tms.errors import TmsInvalidArgumentError
from tms.store.kv import KeyValueStore
from tms.store.subscriptions import SubscriptionStore

__all__ = ["Opened", "StoreConfig", "open_store"]


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
        from txms_common.pgurl import redact  # noqa: PLC0415

        return redact(self.store_url)


@dataclass(frozen=True)
class Opened:
    store: KeyValueStore
    cluster: Cluster | None = None
    """Membership and ownership (started by the caller once it serves)."""
    feed: ChangeFeed | None = None
    """Changes told between the instances (the service starts it)."""
    subscriptions: SubscriptionStore | None = None
    """The subscription records' store (None: the message store's own table, enough
    for one instance)."""


def open_store(config: StoreConfig, leveldb: dict[str, int] | None = None) -> Opened:
    """The store, and with a shared one its change feed and cluster membership.
    ``leveldb``: ``LevelDBStore``'s options (``TmsConfig.leveldb_options()``) for the
    embedded store."""
    if config.store_url is None:
        from tms.store.leveldb import LevelDBStore  # noqa: PLC0415

        return Opened(LevelDBStore(config.data_dir, **(leveldb or {})))
    from tms.store.postgres import PostgresStore  # noqa: PLC0415
    from tms.store.postgres.notify import PgChangeFeed  # noqa: PLC0415

    name = config.name or f"{socket.gethostname()}-{os.getpid()}"
    store = PostgresStore(config.store_url, name=f"tms-{name}", shared=bool(config.zookeeper))
    feed = PgChangeFeed(config.store_url, name=f"tms-{name}")
    if not config.zookeeper:
        return Opened(store, None, feed)
    try:
        client = connect(config.zookeeper, config.session_timeout_s)
    except BaseException:
        store.close()
        raise
    from tms.store.zookeeper import ZkSubscriptionStore  # noqa: PLC0415

    cluster = Cluster(
        client, store, name, base=config.zk_path, session_timeout_s=config.session_timeout_s
    )
    # several instances: the records' compare-and-set must hold across them (one
    # process's lock, as the embedded table store uses, does not)
    subscriptions = ZkSubscriptionStore(client, f"{config.zk_path.rstrip('/')}/subscriptions")
    return Opened(store, cluster, feed, subscriptions)
