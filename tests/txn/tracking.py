"""A TxClient wrapper that records how each transaction ended and can inject conflicts."""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable

from txn.errors import TransactionConflictError
from txn.inmemory import InProcessTxClient
from txn.transaction import Transaction


class Outcome(enum.Enum):
    STARTED = "started"
    COMMITTED = "committed"
    ABORTED = "aborted"
    INVALIDATED = "invalidated"


class TrackingClient:
    """Delegates to an in-process client; ``conflicts_on_can_commit`` /
    ``conflicts_on_commit`` make the next N calls raise a conflict."""

    def __init__(self, inner: InProcessTxClient) -> None:
        self.inner = inner
        self.outcome: Outcome | None = None
        self.conflicts_on_can_commit = 0
        self.conflicts_on_commit = 0
        self.starts = 0

    def start_short(self, timeout_s: int | None = None) -> Transaction:
        self.starts += 1
        self.outcome = Outcome.STARTED
        return self.inner.start_short(timeout_s)

    def start_long(self) -> Transaction:
        self.starts += 1
        self.outcome = Outcome.STARTED
        return self.inner.start_long()

    def can_commit_or_throw(self, tx: Transaction, changes: Collection[bytes]) -> None:
        if self.conflicts_on_can_commit > 0:
            self.conflicts_on_can_commit -= 1
            raise TransactionConflictError("injected conflict", transaction_id=tx.transaction_id)
        self.inner.can_commit_or_throw(tx, changes)

    def commit_or_throw(self, tx: Transaction) -> None:
        if self.conflicts_on_commit > 0:
            self.conflicts_on_commit -= 1
            raise TransactionConflictError("injected conflict", transaction_id=tx.transaction_id)
        self.inner.commit_or_throw(tx)
        self.outcome = Outcome.COMMITTED

    def abort(self, tx: Transaction) -> None:
        self.inner.abort(tx)
        self.outcome = Outcome.ABORTED

    def invalidate(self, tx_id: int) -> bool:
        self.outcome = Outcome.INVALIDATED
        return self.inner.invalidate(tx_id)

    def checkpoint(self, tx: Transaction) -> Transaction:
        return self.inner.checkpoint(tx)

    def get_snapshot(self) -> bytes:
        return self.inner.get_snapshot()

    def status(self) -> str:
        return self.inner.status()

    def reset_state(self) -> None:
        self.inner.reset_state()

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> bool:
        return self.inner.truncate_invalid_tx(tx_ids)

    def truncate_invalid_tx_before(self, time_ms: int) -> bool:
        return self.inner.truncate_invalid_tx_before(time_ms)

    def invalid_size(self) -> int:
        return self.inner.invalid_size()

    def prune_now(self) -> None:
        self.inner.prune_now()

    def close(self) -> None:
        self.inner.close()
