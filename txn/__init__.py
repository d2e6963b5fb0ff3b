"""txn: a transaction manager that speaks Apache Tephra's protocol.

Public API::

    from txn import TransactionManager, TxConfig, InProcessTxClient, TransactionContext

See ``txn.errors`` for the error tree and ``txn.aware`` for the participant contract.

Names load on first use, so importing a submodule (``txn.codec``, ``txn.rpc.client``)
does not pay for the manager and its storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from txms_common.lazy import lazy_names
from txn import errors as _errors

if TYPE_CHECKING:
    from txn.aware import TransactionAware as TransactionAware
    from txn.client import TxClient as TxClient
    from txn.codec import decode_transaction as decode_transaction
    from txn.codec import encode_transaction as encode_transaction
    from txn.config import ClientIdRetention as ClientIdRetention
    from txn.config import ServerConfig as ServerConfig
    from txn.config import TxConfig as TxConfig
    from txn.context import TransactionContext as TransactionContext
    from txn.errors import *  # noqa: F403  (the error tree, named by its __all__)
    from txn.executor import NoRetries as NoRetries
    from txn.executor import RetryOnConflict as RetryOnConflict
    from txn.executor import TransactionExecutor as TransactionExecutor
    from txn.inmemory import InProcessTxClient as InProcessTxClient
    from txn.manager import TransactionManager as TransactionManager
    from txn.persist.local import LocalDirStorage as LocalDirStorage
    from txn.persist.memory import MemoryStorage as MemoryStorage
    from txn.persist.store import TransactionStateStore as TransactionStateStore
    from txn.state import TransactionSnapshot as TransactionSnapshot
    from txn.transaction import NO_TX_IN_PROGRESS as NO_TX_IN_PROGRESS
    from txn.transaction import Transaction as Transaction
    from txn.transaction import TransactionType as TransactionType
    from txn.transaction import VisibilityLevel as VisibilityLevel

_HOMES: dict[str, tuple[str, ...]] = {
    "txn.aware": ("TransactionAware",),
    "txn.client": ("TxClient",),
    "txn.codec": (
        "decode_transaction",
        "encode_transaction",
    ),
    "txn.config": (
        "ClientIdRetention",
        "ServerConfig",
        "TxConfig",
    ),
    "txn.context": ("TransactionContext",),
    "txn.errors": tuple(_errors.__all__),
    "txn.executor": (
        "NoRetries",
        "RetryOnConflict",
        "TransactionExecutor",
    ),
    "txn.inmemory": ("InProcessTxClient",),
    "txn.manager": ("TransactionManager",),
    "txn.persist.local": ("LocalDirStorage",),
    "txn.persist.memory": ("MemoryStorage",),
    "txn.persist.store": ("TransactionStateStore",),
    "txn.state": ("TransactionSnapshot",),
    "txn.transaction": (
        "NO_TX_IN_PROGRESS",
        "Transaction",
        "TransactionType",
        "VisibilityLevel",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
# Every name of the table and only those; type checkers read the imports above.
__all__ = sorted(_HOME_OF)  # noqa: PLE0605
__getattr__, __dir__ = lazy_names("txn", _HOME_OF, globals())
