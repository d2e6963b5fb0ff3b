"""``TxClient``: what applications and participants need from a transaction service.

Two implementations behind this one protocol: ``txn.inmemory.InProcessTxClient`` (calls a
``TransactionManager`` in the same process) and ``txn.rpc.client.ThriftTxClient`` (talks
Tephra's Thrift protocol to a ``txn serve`` or a Tephra server). Both raise only ``txn``
errors; every call that returns has been made durable by the manager.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Protocol

from txn.state import WritePointerState
from txn.transaction import Transaction

__all__ = ["TxClient"]


class TxClient(Protocol):
    """Tephra's ``TransactionSystemClient``, in Python."""

    def start_short(self, timeout_s: int | None = None) -> Transaction:
        """Start a short transaction (``InvalidArgumentError`` for a timeout <= 0 or
        above the server's maximum)."""
        ...

    def start_long(self) -> Transaction:
        """Start a long transaction."""
        ...

    def can_commit_or_throw(self, tx: Transaction, changes: Collection[bytes]) -> None:
        """Declare the change set. Raises ``TransactionConflictError``,
        ``TransactionSizeError`` or ``TransactionNotInProgressError``."""

    def commit_or_throw(self, tx: Transaction) -> None:
        """Commit. Raises ``TransactionConflictError`` or ``TransactionNotInProgressError``."""

    def abort(self, tx: Transaction) -> None:
        """Abort; silent for transactions that are unknown, finished or timed out."""

    def invalidate(self, tx_id: int) -> bool:
        """Invalidate; False for committed or unknown transactions."""
        ...

    def checkpoint(self, tx: Transaction) -> Transaction:
        """A new write pointer with the same read snapshot
        (``TransactionNotInProgressError`` if ``tx`` is not in progress)."""
        ...

    def extend_timeout(self, tx_id: int, timeout_s: int) -> int:
        """Let short transaction ``tx_id`` run ``timeout_s`` seconds from now; its new
        expiration (ms). ``TransactionNotInProgressError`` when it is not in progress,
        ``InvalidArgumentError`` for a long one or a bad timeout. An extension of
        Tephra's protocol."""
        ...

    def get_snapshot(self) -> bytes:
        """The manager's state in snapshot-codec-V4 bytes (``SnapshotUnavailableError``)."""
        ...

    def status(self) -> str:
        """``"OK"`` or ``"NOTOK"``."""
        ...

    def reset_state(self) -> None:
        """Forget every transaction (an operator's tool, not for applications)."""

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> bool:
        """Remove ids from the invalid list; True if it changed."""
        ...

    def truncate_invalid_tx_before(self, time_ms: int) -> bool:
        """Remove invalid ids started before ``time_ms`` (``InvalidTruncateTimeError``
        while an older transaction is in progress)."""
        ...

    def invalid_size(self) -> int: ...

    def prune_now(self) -> None:
        """Run invalid-list pruning now (a no-op where pruning is disabled)."""

    def write_pointer_state(
        self, pointers: Iterable[int] = (), durable: bool = False
    ) -> WritePointerState:
        """The newest write pointer issued, the pointers in progress and which of
        ``pointers`` are invalid (``txn.state.WritePointerState``); read-only. Against a
        server without this txms extension (Tephra's), computed from a short
        transaction that is started and aborted (durable either way).

        Without ``durable`` the answer may show finished a commit or invalidation whose
        log edit is not yet durable (right for refusing writes, ``tms.guard``); a reader
        that decides from it what is visible passes ``durable=True``: the answer then
        comes once everything it shows is durable (``TransactionManager
        .write_pointer_state``)."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
