"""A transaction system under test: a manager on memory storage, a fake clock, and a
client (in-process, or Thrift against a real server on loopback port 0)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.fakes import FakeClock
from txms_common.retry import RetryNTimes
from txn.client import TxClient
from txn.config import ServerConfig, TxConfig
from txn.inmemory import InProcessTxClient
from txn.manager import TransactionManager
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.client import ThriftTxClient
from txn.rpc.server import ServerThread, new_server

SYSTEM_CONFIG = TxConfig(
    max_timeout_s=5 * 86_400,
    changeset_count_limit=50,
    changeset_count_warn=40,
    changeset_size_limit=2048,
    changeset_size_warn=1024,
    cleanup_interval_s=0,
    snapshot_interval_s=0,
)


@dataclass
class TxSystem:
    client: TxClient
    manager: TransactionManager
    storage: MemoryStorage
    clock: FakeClock


@contextmanager
def in_process_system(config: TxConfig = SYSTEM_CONFIG) -> Iterator[TxSystem]:
    clock = FakeClock()
    storage = MemoryStorage()
    manager = TransactionManager(config, TransactionStateStore(storage), clock)
    manager.start()
    try:
        yield TxSystem(InProcessTxClient(manager), manager, storage, clock)
    finally:
        manager.stop()


@contextmanager
def thrift_system(config: TxConfig = SYSTEM_CONFIG) -> Iterator[TxSystem]:
    """The same manager behind a real Thrift server on 127.0.0.1, port 0."""
    with in_process_system(config) as local:
        server = ServerThread(new_server(local.manager, ServerConfig(port=0)))
        address = server.start()
        client = ThriftTxClient(address, client_id="tests", retry=RetryNTimes(2), timeout_s=10)
        try:
            yield TxSystem(client, local.manager, local.storage, local.clock)
        finally:
            client.close()
            server.stop()


def restarted(system: TxSystem, config: TxConfig = SYSTEM_CONFIG) -> TransactionManager:
    """A second manager recovering from the first one's storage (no clean stop)."""
    manager = TransactionManager(config, TransactionStateStore(system.storage), system.clock)
    manager.start()
    return manager
