"""``TransactionAware``: the contract of a participant in a transaction.

A ``TransactionContext`` drives participants in this exact order:

1. ``start_tx(tx)`` on each, in the order they were added;
2. at finish: ``get_tx_changes()`` on each (the union is checked for conflicts),
   then ``commit_tx()`` on each (persist; ``False`` means "cannot commit"),
   then the transaction is committed, then ``post_tx_commit()`` on each;
3. on any failure before the commit: ``rollback_tx()`` on **every** participant
   (``True`` means all its changes are undone), then the transaction is aborted — or
   invalidated if any rollback failed, since its writes may still be there;
4. after ``checkpoint()``: ``update_tx(tx)`` with the new write pointer, keeping the
   participant's accumulated changes.

A participant may set a class attribute ``persists_concurrently = True``: its
``commit_tx`` may then run on another thread at the same time as the other participants'
(``txn.persisting``), so it must touch nothing the calling thread uses meanwhile (its
client thread-safe, its state its own). The context waits for every ``commit_tx`` before
it rolls back or commits. Without the attribute, ``commit_tx`` runs in the calling thread.

``transaction_aware_name()`` names the participant in error messages and may be called
at any time; it should not fail (if it does, the name shows as ``unknown``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from txn.transaction import Transaction

__all__ = ["TransactionAware"]


@runtime_checkable
class TransactionAware(Protocol):
    """A participant whose changes commit or roll back with the transaction."""

    def start_tx(self, tx: Transaction) -> None:
        """Begin work under ``tx``; forget anything from an earlier transaction."""

    def update_tx(self, tx: Transaction) -> None:
        """Switch to ``tx`` (a checkpoint of the current one), keeping the changes."""

    def get_tx_changes(self) -> Collection[bytes]:
        """The change keys to check for conflicts (may be empty)."""
        ...

    def commit_tx(self) -> bool:
        """Persist the changes; return False (or raise) if that is not possible."""
        ...

    def post_tx_commit(self) -> None:
        """Called after the transaction committed (e.g. to clear buffers)."""

    def rollback_tx(self) -> bool:
        """Undo the changes; return True only if all of them were undone."""
        ...

    def transaction_aware_name(self) -> str:
        """A name for messages."""
        ...
