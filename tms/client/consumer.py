"""``SubscriptionConsumer``: a subscription read inside a transaction, its new position
committed as part of it (``txn.TransactionAware``) — the consuming third of an
exactly-once consume → process → publish loop.

Inside a ``TransactionContext`` (or ``TransactionExecutor``):

* ``poll`` reads from the subscription's position **as of the transaction's snapshot**
  (the newest position committed before it started), then on from where the last poll
  of the same transaction ended; with a transactional subscription it returns committed
  messages only, stopping at the first uncommitted one (``held``);
* ``get_tx_changes`` declares the subscription's change key once something was read, so
  of two overlapping transactions that read it, at most one commits: the other gets
  ``TransactionConflictError`` (the executor retries it), never a duplicate range;
* ``commit_tx`` writes the new position under the transaction's write pointer
  (``POST …/commit`` with ``inTransaction``): it becomes the subscription's position
  when the transaction commits, and never if it aborts or is invalidated;
* ``commit_tx`` runs while the other participants persist (``persists_concurrently``,
  ``txn.persisting``): with a ``TransactionalPublisher``, the position and the outputs
  are two writes in flight at once; if either fails, both are rolled back;
* ``rollback_tx`` removes the positions written under the transaction's write pointers.
  As for ``TransactionalPublisher``, a write without a definite answer (a timeout, a
  lost connection, a 5xx) may have been stored, so ``rollback_tx`` returns False and the
  context invalidates the transaction instead of aborting it.

Together with ``TransactionalPublisher`` and the application's transactional state
(e.g. ``txn.sqlite_table.SqliteTable``) in one context, every input is processed
exactly once as seen by transactional readers of the outputs and of the state.
Long transactions have no conflict detection (Tephra's rule): consume in short ones.
A seek (or a non-transactional commit) of the subscription while a transaction reads it
makes its commit fail with ``BadVersionError`` (the seek wins).
"""

from __future__ import annotations

from collections.abc import Collection

from tms.client.aware import outcome_unknown
from tms.client.http import MessagingClient
from tms.errors import TmsError
from tms.ids import MessageId
from tms.model import Message
from tms.positions import change_key
from tms.subscription import SubscriptionId
from txn.transaction import Transaction, TransactionType

__all__ = ["SubscriptionConsumer"]


class SubscriptionConsumer:
    """See the module docstring."""

    persists_concurrently = True  # its client is thread-safe; commit_tx touches only its own

    def __init__(
        self, client: MessagingClient, subscription: SubscriptionId, *, name: str | None = None
    ) -> None:
        self.client = client
        self.subscription = subscription
        self.name = name or f"tms-subscription:{subscription}"
        self._tx: Transaction | None = None
        self._reset()

    def _reset(self) -> None:
        self._tx = None
        self._next: MessageId | None = None
        self._persisted: MessageId | None = None  # what a rollback would go back to
        self._version: int | None = None
        self._written: list[int] = []
        self._in_doubt = False
        self.held = False
        """The last poll stopped at a transaction this one cannot see: finish it and
        read on in a new one."""
        self.held_finished = False

    @property
    def position(self) -> MessageId | None:
        """Where the next poll of this transaction starts (None before the first)."""
        return self._next

    def poll(self, limit: int = 100, *, wait_ms: int = 0) -> list[Message]:
        """Up to ``limit`` messages from the position (see the module docstring)."""
        tx = self._tx
        if tx is None:
            raise TmsError("SubscriptionConsumer.poll needs a transaction (start_tx)")
        if tx.type is TransactionType.LONG:
            raise TmsError("a long transaction has no conflict detection: consume in short ones")
        batch = self.client.poll_subscription(
            self.subscription, start=self._next, limit=limit, transaction=tx, wait_ms=wait_ms
        )
        if self._persisted is None:
            self._persisted = batch.start  # the position as of this transaction's start
        if self._version is None:
            self._version = batch.version
        self._next = batch.position
        self.held, self.held_finished = batch.held, batch.held_finished
        return batch.messages

    # -- TransactionAware ---------------------------------------------------------------

    def start_tx(self, tx: Transaction) -> None:
        self._reset()
        self._tx = tx

    def update_tx(self, tx: Transaction) -> None:
        self._tx = tx  # a checkpoint: commit_tx already wrote the position so far

    def get_tx_changes(self) -> Collection[bytes]:
        return [change_key(self.subscription)] if self._moved() else []

    def _moved(self) -> bool:
        return self._next is not None and self._next != self._persisted

    def commit_tx(self) -> bool:
        tx = self._tx
        if tx is None or not self._moved():
            return True
        assert self._next is not None and self._version is not None
        self._written.append(tx.write_pointer)
        try:
            self.client.commit_in_transaction(self.subscription, self._next, self._version, tx)
        except BaseException as exc:
            self._in_doubt = self._in_doubt or outcome_unknown(exc)
            raise
        self._persisted = self._next
        return True

    def post_tx_commit(self) -> None:
        self._reset()

    def rollback_tx(self) -> bool:
        ok = not self._in_doubt
        try:
            if self._written:
                try:
                    self.client.rollback_positions(self.subscription, self._written)
                except TmsError:
                    ok = False
        finally:
            self._reset()
        return ok

    def transaction_aware_name(self) -> str:
        return self.name
