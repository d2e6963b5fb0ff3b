"""The real servers, in this process, on loopback port 0: the transaction manager behind
its Thrift server and the messaging service (LevelDB) behind HTTP, with clients."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tms.client import MessagingClient
from tms.config import TmsConfig
from tms.http.app import HttpConfig
from tms.http.server import HttpServer, HttpServerThread
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from txn.config import ServerConfig, TxConfig
from txn.manager import TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.client import ThriftTxClient
from txn.rpc.retry import RetryNTimes
from txn.rpc.server import ServerThread, ThriftServer


@dataclass
class Stack:
    url: str
    tx_address: str
    messaging: MessagingClient
    tx: ThriftTxClient
    tx_server: ServerThread
    manager: TransactionManager
    service: MessagingService

    def options(self, topic: str, **extra: str) -> dict[str, str]:
        """Options of the Spark data source for ``topic`` on this stack."""
        return {"url": self.url, "topic": topic, "txServer": self.tx_address, **extra}


@contextlib.contextmanager
def running_stack(root: Path, tx_config: TxConfig | None = None) -> Iterator[Stack]:
    """Both servers with their state under ``root``; clients that retry once. Timed-out
    transactions are not invalidated unless ``tx_config`` sets a cleanup interval."""
    manager = TransactionManager(
        tx_config or TxConfig(cleanup_interval_s=0, snapshot_interval_s=0),
        TransactionStateStore(LocalDirStorage(root / "txn")),
    )
    manager.start()
    tx_server = ServerThread(ThriftServer(manager, ServerConfig(port=0)))
    host, port = tx_server.start()
    service = MessagingService(LevelDBStore(root / "tms"), TmsConfig())
    http = HttpServerThread(HttpServer(service, HttpConfig(port=0)))
    url = http.start()
    messaging = MessagingClient(url, retries=1, backoff_s=0.01)
    tx = ThriftTxClient((host, port), retry=RetryNTimes(1), timeout_s=5)
    try:
        yield Stack(url, f"{host}:{port}", messaging, tx, tx_server, manager, service)
    finally:
        messaging.close()
        tx.close()
        http.stop()
        service.close()
        tx_server.stop()
        manager.stop()
