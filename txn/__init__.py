"""txn: a transaction manager that speaks Apache Tephra's protocol.

Public API::

    from txn import TransactionManager, TxConfig, InProcessTxClient, TransactionContext

See ``txn.errors`` for the error tree and ``txn.aware`` for the participant contract.
"""

from __future__ import annotations

from txn.aware import TransactionAware
from txn.client import TxClient
from txn.codec import decode_transaction, encode_transaction
from txn.config import ClientIdRetention, ServerConfig, TxConfig
from txn.context import TransactionContext
from txn.errors import (
    CodecError,
    CorruptStateError,
    InvalidArgumentError,
    InvalidStateError,
    InvalidTruncateTimeError,
    ManagerNotRunningError,
    SnapshotUnavailableError,
    TransactionConflictError,
    TransactionFailureError,
    TransactionNotInProgressError,
    TransactionSizeError,
    TransientTxError,
    TxError,
    TxServiceError,
    TxServiceUnavailableError,
    TxStorageError,
)
from txn.executor import NoRetries, RetryOnConflict, TransactionExecutor
from txn.inmemory import InProcessTxClient
from txn.manager import TransactionManager
from txn.persist.local import LocalDirStorage
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.state import TransactionSnapshot
from txn.transaction import (
    NO_TX_IN_PROGRESS,
    Transaction,
    TransactionType,
    VisibilityLevel,
)

__all__ = [
    "NO_TX_IN_PROGRESS",
    "ClientIdRetention",
    "CodecError",
    "CorruptStateError",
    "InProcessTxClient",
    "InvalidArgumentError",
    "InvalidStateError",
    "InvalidTruncateTimeError",
    "LocalDirStorage",
    "ManagerNotRunningError",
    "MemoryStorage",
    "NoRetries",
    "RetryOnConflict",
    "ServerConfig",
    "SnapshotUnavailableError",
    "Transaction",
    "TransactionAware",
    "TransactionConflictError",
    "TransactionContext",
    "TransactionExecutor",
    "TransactionFailureError",
    "TransactionManager",
    "TransactionNotInProgressError",
    "TransactionSizeError",
    "TransactionSnapshot",
    "TransactionStateStore",
    "TransactionType",
    "TransientTxError",
    "TxClient",
    "TxConfig",
    "TxError",
    "TxServiceError",
    "TxServiceUnavailableError",
    "TxStorageError",
    "VisibilityLevel",
    "decode_transaction",
    "encode_transaction",
]
