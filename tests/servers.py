"""The real servers, in this process, on loopback port 0: the transaction manager behind
its Thrift server and the messaging service (LevelDB) behind HTTP and the binary
protocol, with clients."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tms.client import MessagingClient
from tms.config import TmsConfig
from tms.guard import TransactionStateGuard
from tms.http.app import HttpConfig
from tms.http.server import HttpServer, HttpServerThread
from tms.rpc.config import RpcConfig
from tms.rpc.server import RpcServer
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.store.tables import Tables
from txms_common.retry import RetryNTimes
from txn.config import ServerConfig, TxConfig
from txn.manager import TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.client import ThriftTxClient
from txn.rpc.server import ServerThread, new_server
from txn.rpc.tls import ClientTls

if TYPE_CHECKING:
    from tests.tls import Pki


@dataclass
class Stack:
    url: str
    tx_address: str
    messaging: MessagingClient
    tx: ThriftTxClient
    tx_server: ServerThread
    manager: TransactionManager
    service: MessagingService
    tables: Tables
    """A view of the service's store, to check its rows."""
    rpc_url: str = ""

    def options(self, topic: str, **extra: str) -> dict[str, str]:
        """Options of the Spark data source for ``topic`` on this stack."""
        return {"url": self.url, "topic": topic, "txServer": self.tx_address, **extra}


@contextlib.contextmanager
def running_stack(
    root: Path, tx_config: TxConfig | None = None, tls: Pki | None = None
) -> Iterator[Stack]:
    """Both servers with their state under ``root``; clients that retry once. Timed-out
    transactions are not invalidated unless ``tx_config`` sets a cleanup interval. With
    ``tls``, both servers speak TLS with its certificate (clients check it against its
    CA), and the transaction server requires a client certificate its CA signed (the
    clients present that same certificate)."""
    manager = TransactionManager(
        tx_config or TxConfig(cleanup_interval_s=0, snapshot_interval_s=0),
        TransactionStateStore(LocalDirStorage(root / "txn")),
    )
    manager.start()
    cert = str(tls.cert_file) if tls else None
    key = str(tls.key_file) if tls else None
    ca = str(tls.ca_file) if tls else None
    client_tls = ClientTls(ca, cert, key) if tls else None
    tx_server = ServerThread(
        new_server(manager, ServerConfig(port=0, tls_cert=cert, tls_key=key, tls_client_ca=ca))
    )
    host, port = tx_server.start()
    # As deployed: transactional writes are checked against the transaction server.
    guard_client = ThriftTxClient((host, port), retry=RetryNTimes(2), timeout_s=5, tls=client_tls)
    store = LevelDBStore(root / "tms")
    service = MessagingService(store, TmsConfig(), guard=TransactionStateGuard(guard_client))
    http = HttpServerThread(
        HttpServer(service, HttpConfig(port=0, tls_cert_file=cert, tls_key_file=key))
    )
    url = http.start()
    http_port = int(url.rsplit(":", 1)[1])
    rpc = HttpServerThread(RpcServer(service, RpcConfig(port=0), http_port=http_port))
    rpc_url = rpc.start()
    messaging = MessagingClient(url, retries=1, backoff_s=0.01, ca_bundle=ca)
    tx = ThriftTxClient((host, port), retry=RetryNTimes(1), timeout_s=5, tls=client_tls)
    try:
        tables = Tables(store)
        yield Stack(
            url, f"{host}:{port}", messaging, tx, tx_server, manager, service, tables, rpc_url
        )
    finally:
        messaging.close()
        tx.close()
        rpc.stop()
        http.stop()
        service.close()
        guard_client.close()
        tx_server.stop()
        manager.stop()
