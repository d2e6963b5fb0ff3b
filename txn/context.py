"""``TransactionContext``: drives ``TransactionAware`` participants through one
transaction at a time, in Tephra's exact call order (see ``txn.aware``).

Failure handling, as Tephra's:

* a participant failing ``start_tx`` aborts the transaction (no rollbacks; later
  participants are not started);
* participants that persist concurrently (``txn.persisting``) have their ``commit_tx``
  running at once, and the step waits for all of them before it goes on or rolls back;
* any failure before the commit rolls back **every** participant, then aborts — or
  invalidates, if a rollback failed — and raises the **first** error; later errors are
  attached as ``suppressed``;
* ``post_tx_commit`` failures are reported after all participants were called; the
  transaction stays committed.

As a context manager, ``with ctx:`` starts a transaction and finishes it when the block
ends; if the block raises, the transaction is rolled back and aborted and the block's
exception propagates unchanged.
"""

from __future__ import annotations

from types import TracebackType

from txn.aware import TransactionAware
from txn.client import TxClient
from txn.errors import (
    InvalidStateError,
    TransactionFailureError,
    TransactionNotInProgressError,
)
from txn.persisting import persist_all
from txn.transaction import Transaction

__all__ = ["TransactionContext"]


class TransactionContext:
    """One transaction at a time over a set of participants (kept in insertion order)."""

    def __init__(self, client: TxClient, *awares: TransactionAware) -> None:
        self._client = client
        self._awares: dict[int, TransactionAware] = {}
        for aware in awares:
            self._awares.setdefault(id(aware), aware)
        self._current: Transaction | None = None

    @property
    def current_transaction(self) -> Transaction | None:
        return self._current

    @property
    def participants(self) -> list[TransactionAware]:
        return list(self._awares.values())

    def add_transaction_aware(self, aware: TransactionAware) -> bool:
        """Add a participant; it joins a running transaction at once. False if present."""
        if id(aware) in self._awares:
            return False
        self._awares[id(aware)] = aware
        if self._current is not None:
            aware.start_tx(self._current)
        return True

    def remove_transaction_aware(self, aware: TransactionAware) -> bool:
        """Remove a participant (not while a transaction runs). False if absent."""
        if self._current is not None:
            raise InvalidStateError(
                "Cannot remove TransactionAware while there is an active transaction."
            )
        return self._awares.pop(id(aware), None) is not None

    # -- the transaction --------------------------------------------------------------

    def start(self, timeout_s: int | None = None) -> Transaction:
        """Start a short transaction and start every participant in it."""
        return self._begin(self._client.start_short(timeout_s))

    def start_long(self) -> Transaction:
        """Start a long transaction (aborting it invalidates it)."""
        return self._begin(self._client.start_long())

    def _begin(self, tx: Transaction) -> Transaction:
        if self._current is not None:
            self._client.abort(tx)
            raise InvalidStateError("a transaction is already active in this context")
        self._current = tx
        for aware in self.participants:
            try:
                aware.start_tx(tx)
            except Exception as exc:
                failure = self._failure("start", aware, exc)
                self._current = None
                try:
                    self._client.abort(tx)
                except Exception as abort_exc:
                    failure.suppress(abort_exc)
                raise failure from exc
        return tx

    def finish(self) -> None:
        """Check conflicts, persist, commit, post-commit (see the module docstring)."""
        if self._current is None:
            raise InvalidStateError("Cannot finish tx that has not been started")
        self._check_for_conflicts()
        self._persist()
        self._commit()
        self._post_commit()

    def abort(self, cause: TransactionFailureError | None = None) -> None:
        """Roll back every participant, then abort (or invalidate if a rollback failed).

        Raises ``cause`` if given, else the first error met. A no-op with no transaction.
        """
        tx = self._current
        if tx is None:
            return
        try:
            success = True
            for aware in self.participants:
                try:
                    if not aware.rollback_tx():
                        success = False
                except Exception as exc:
                    success = False
                    err = self._failure("roll back changes in", aware, exc)
                    if cause is None:
                        cause = err
                    else:
                        cause.suppress(err)
            try:
                if success:
                    self._client.abort(tx)
                else:
                    self._client.invalidate(tx.transaction_id)
            except Exception as exc:
                action = "abort" if success else "invalidate"
                err = TransactionFailureError(
                    f"Error while calling transaction service to {action} "
                    f"transaction {tx.transaction_id}."
                )
                err.__cause__ = exc
                if cause is None:
                    cause = err
                else:
                    cause.suppress(err)
            if cause is not None:
                raise cause
        finally:
            self._current = None

    def checkpoint(self) -> Transaction:
        """Persist the changes so far and move every participant to a new write pointer."""
        tx = self._current
        if tx is None:
            raise InvalidStateError("Cannot checkpoint tx that has not been started")
        self._persist()
        try:
            self._current = self._client.checkpoint(tx)
            for aware in self.participants:
                aware.update_tx(self._current)
        except TransactionNotInProgressError as exc:
            self._abort_with(f"Transaction {tx.transaction_id} is not in progress.", exc)
        except Exception as exc:
            self._abort_with(f"Exception from checkpoint for transaction {tx.transaction_id}.", exc)
        assert self._current is not None
        return self._current

    # -- steps ------------------------------------------------------------------------

    def _tx_id(self) -> int:
        assert self._current is not None
        return self._current.transaction_id

    def _failure(
        self, action: str, aware: TransactionAware, cause: BaseException | None
    ) -> TransactionFailureError:
        name_error: Exception | None = None
        try:
            name = aware.transaction_aware_name()
        except Exception as exc:
            name, name_error = "unknown", exc
        tx_id = self._current.transaction_id if self._current is not None else -1
        err = TransactionFailureError(
            f"Unable to {action} transaction-aware '{name}' for transaction {tx_id}"
        )
        err.__cause__ = cause
        if name_error is not None:
            err.suppress(name_error)
        return err

    def _abort_with(self, message: str, cause: BaseException) -> None:
        err = TransactionFailureError(message)
        err.__cause__ = cause
        self.abort(err)

    def _check_for_conflicts(self) -> None:
        changes: list[bytes] = []
        for aware in self.participants:
            try:
                changes.extend(aware.get_tx_changes())
            except Exception as exc:
                self.abort(self._failure("retrieve changes from", aware, exc))
        assert self._current is not None
        try:
            self._client.can_commit_or_throw(self._current, changes)
        except TransactionFailureError as exc:
            self.abort(exc)
        except Exception as exc:
            self._abort_with(f"Exception from canCommit for transaction {self._tx_id()}.", exc)

    def _persist(self) -> None:
        failure: TransactionFailureError | None = None
        for outcome in persist_all(self.participants):
            if outcome.ok or not outcome.called:
                continue
            err = self._failure("persist changes of", outcome.aware, outcome.error)
            if failure is None:
                failure = err
            else:
                failure.suppress(err)
        if failure is not None:
            self.abort(failure)

    def _commit(self) -> None:
        assert self._current is not None
        try:
            self._client.commit_or_throw(self._current)
        except TransactionFailureError as exc:
            self.abort(exc)
        except Exception as exc:
            self._abort_with(f"Exception from commit for transaction {self._tx_id()}.", exc)

    def _post_commit(self) -> None:
        first: TransactionFailureError | None = None
        try:
            for aware in self.participants:
                try:
                    aware.post_tx_commit()
                except Exception as exc:
                    err = self._failure("perform post-commit for", aware, exc)
                    if first is None:
                        first = err
                    else:
                        first.suppress(err)
            if first is not None:
                raise first
        finally:
            self._current = None

    # -- context manager --------------------------------------------------------------

    def __enter__(self) -> TransactionContext:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._current is None:
            return
        if exc is None:
            self.finish()
            return
        try:
            self.abort()
        except TransactionFailureError as abort_error:
            exc.add_note(f"while aborting the transaction: {abort_error}")
