"""The one error tree of the ``txn`` package.

::

    TxError
     ├── TransientTxError                      retrying the same call may succeed
     │    ├── TransactionConflictError         (also a TransactionFailureError)
     │    └── TxServiceUnavailableError        the transaction server could not be reached
     ├── TransactionFailureError               a transaction could not be completed
     │    ├── TransactionConflictError
     │    ├── TransactionNotInProgressError
     │    └── TransactionSizeError
     ├── InvalidArgumentError                  (also ValueError) bad timeout, missing client id
     ├── InvalidStateError                     (also RuntimeError) e.g. finish() without start()
     ├── InvalidTruncateTimeError              truncate-before while older transactions run
     ├── SnapshotUnavailableError              the manager could not produce a snapshot
     ├── ManagerNotRunningError                call before start() or after stop()
     ├── CodecError                            (also ValueError) bytes that do not decode
     ├── TxStorageError                        the state directory failed (I/O)
     │    ├── CorruptStateError                a snapshot or log cannot be read back
     │    └── FencedError                      a newer leader owns the shared state
     └── TxServiceError                        the server answered with something unexpected

Foreign exceptions (Thrift, OS errors) are translated at exactly one boundary each:
``txn.rpc.errors`` for Thrift, ``txn.persist.local`` for the file system,
``txn.persist.postgres`` for PostgreSQL and ``txn.ha`` for ZooKeeper.
"""

from __future__ import annotations

__all__ = [
    "CodecError",
    "CorruptStateError",
    "FencedError",
    "InvalidArgumentError",
    "InvalidStateError",
    "InvalidTruncateTimeError",
    "ManagerNotRunningError",
    "SnapshotUnavailableError",
    "TransactionConflictError",
    "TransactionFailureError",
    "TransactionNotInProgressError",
    "TransactionSizeError",
    "TransientTxError",
    "TxError",
    "TxServiceError",
    "TxServiceUnavailableError",
    "TxStorageError",
]


class TxError(Exception):
    """Root of every error raised by ``txn``."""


class TransientTxError(TxError):
    """The retryable branch: the same call may succeed when tried again."""


class TransactionFailureError(TxError):
    """A transaction could not be started, committed or rolled back (Tephra's
    ``TransactionFailureException``).

    ``__cause__`` is the first error; later errors met while cleaning up (a failed
    rollback, a failed abort) are in ``suppressed``, in the order they happened.
    """

    def __init__(self, message: str, *args: object) -> None:
        super().__init__(message, *args)
        self.suppressed: list[BaseException] = []

    def suppress(self, error: BaseException) -> None:
        """Record a secondary error (shown in tracebacks as a note)."""
        self.suppressed.append(error)
        self.add_note(f"suppressed: {type(error).__name__}: {error}")


class TransactionConflictError(TransactionFailureError, TransientTxError):
    """The change set overlaps with one committed after the transaction started.

    Retrying the whole transaction (not the single call) may succeed.
    """

    def __init__(
        self,
        message: str,
        *,
        transaction_id: int | None = None,
        conflicting_key: str | None = None,
        conflicting_client: str | None = None,
    ) -> None:
        super().__init__(message)
        self.transaction_id = transaction_id
        self.conflicting_key = conflicting_key
        self.conflicting_client = conflicting_client


class TransactionNotInProgressError(TransactionFailureError):
    """The transaction is not in progress: committed, aborted, timed out or unknown."""


class TransactionSizeError(TransactionFailureError):
    """The change set exceeds the configured count or byte limit."""


class InvalidArgumentError(TxError, ValueError):
    """An argument is out of range (Tephra's ``IllegalArgumentException``)."""


class InvalidStateError(TxError, RuntimeError):
    """A call made in the wrong state, such as ``finish()`` with no transaction."""


class InvalidTruncateTimeError(TxError):
    """``truncate_invalid_tx_before`` was asked to cut below an in-progress transaction."""


class SnapshotUnavailableError(TxError):
    """The manager is not running, or writing the snapshot failed."""


class ManagerNotRunningError(TxError):
    """The manager has not been started, has been stopped, or has failed."""


class CodecError(TxError, ValueError):
    """Bytes that do not decode as the expected wire or storage format."""


class TxStorageError(TxError):
    """Reading or writing the state directory failed."""


class CorruptStateError(TxStorageError):
    """A snapshot or log file exists but cannot be decoded (beyond a torn last record)."""


class FencedError(TxStorageError):
    """This writer's epoch is no longer the shared store's current one: another server
    was elected and took the state over. Nothing was written; the writer must stop."""

    def __init__(self, message: str, *, epoch: int | None = None) -> None:
        super().__init__(message)
        self.epoch = epoch


class TxServiceError(TxError):
    """The transaction server answered with an error the protocol does not declare."""


class TxServiceUnavailableError(TxServiceError, TransientTxError):
    """The transaction server could not be reached, after retries."""
