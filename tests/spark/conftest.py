"""Real Spark (``local[2]``, with up to 4 attempts per task) against the real transaction
server (Thrift, loopback) and messaging service (HTTP, loopback, LevelDB)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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
from txn.rpc.server import ServerThread, ThriftServer


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from tms.spark import register

    # Executors run Python workers: the interpreter running the tests, with tms on its path.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,4]")  # 2 threads; a task may run 4 times
        .appName("txms-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@dataclass
class Stack:
    url: str
    tx_address: str
    messaging: MessagingClient
    tx: ThriftTxClient
    manager: TransactionManager
    service: MessagingService

    def options(self, topic: str, **extra: str) -> dict[str, str]:
        return {"url": self.url, "topic": topic, "txServer": self.tx_address, **extra}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    manager = TransactionManager(
        TxConfig(cleanup_interval_s=0, snapshot_interval_s=0),
        TransactionStateStore(LocalDirStorage(tmp_path / "txn")),
    )
    manager.start()
    tx_server = ServerThread(ThriftServer(manager, ServerConfig(port=0)))
    host, port = tx_server.start()
    service = MessagingService(LevelDBStore(tmp_path / "tms"), TmsConfig())
    http = HttpServerThread(HttpServer(service, HttpConfig(port=0)))
    url = http.start()
    messaging = MessagingClient(url)
    tx = ThriftTxClient((host, port))
    yield Stack(url, f"{host}:{port}", messaging, tx, manager, service)
    messaging.close()
    tx.close()
    http.stop()
    tx_server.stop()
    service.close()
    manager.stop()
