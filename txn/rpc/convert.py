"""The one boundary between ``txn`` values/errors and Tephra's Thrift types.

* ``to_thrift`` / ``from_thrift``: ``Transaction`` <-> ``TTransaction`` with Tephra's
  ``TransactionConverterUtils`` rules (missing lists are empty, missing or unknown
  visibility is SNAPSHOT, a type other than SHORT is LONG, missing numbers are 0).
* ``error_from_thrift``: a declared Thrift exception -> the ``txn`` error it means.
* ``generic_exception``: the ``TGenericException`` Tephra sends for an argument error or
  an oversized change set, named by the Java class it stands for.
"""

from __future__ import annotations

from typing import Any

from txn.codec import THRIFT_TO_VISIBILITY, TYPE_TO_THRIFT, VISIBILITY_TO_THRIFT
from txn.errors import (
    InvalidArgumentError,
    InvalidTruncateTimeError,
    SnapshotUnavailableError,
    TransactionConflictError,
    TransactionNotInProgressError,
    TransactionSizeError,
    TxError,
    TxServiceError,
)
from txn.rpc.idl import tephra
from txn.transaction import Transaction, TransactionType, VisibilityLevel

__all__ = [
    "ILLEGAL_ARGUMENT",
    "TRANSACTION_SIZE",
    "conflict_message",
    "error_from_thrift",
    "from_thrift",
    "generic_exception",
    "to_thrift",
]

ILLEGAL_ARGUMENT = "java.lang.IllegalArgumentException"
TRANSACTION_SIZE = "org.apache.tephra.TransactionSizeException"


def to_thrift(tx: Transaction) -> Any:
    """A ``TTransaction`` with all nine fields set."""
    return tephra.TTransaction(
        transactionId=tx.transaction_id,
        readPointer=tx.read_pointer,
        invalids=tx.invalids,
        inProgress=tx.in_progress,
        firstShort=tx.first_short_in_progress,
        type=TYPE_TO_THRIFT[tx.type],
        writePointer=tx.write_pointer,
        checkpointWritePointers=tx.checkpoint_write_pointers,
        visibilityLevel=VISIBILITY_TO_THRIFT[tx.visibility_level],
    )


def from_thrift(ttx: Any) -> Transaction:
    """A ``Transaction`` from a (possibly partial) ``TTransaction``."""
    visibility = ttx.visibilityLevel
    return Transaction(
        transaction_id=ttx.transactionId or 0,
        read_pointer=ttx.readPointer or 0,
        invalids=tuple(ttx.invalids or ()),
        in_progress=tuple(ttx.inProgress or ()),
        first_short_in_progress=ttx.firstShort or 0,
        type=TransactionType.SHORT if ttx.type == 1 else TransactionType.LONG,
        write_pointer=ttx.writePointer or 0,
        checkpoint_write_pointers=tuple(ttx.checkpointWritePointers or ()),
        visibility_level=THRIFT_TO_VISIBILITY.get(visibility, VisibilityLevel.SNAPSHOT),
    )


def conflict_message(tx_id: int, key: str | None, client: str | None) -> str:
    return f"Transaction {tx_id} conflicts with {client or 'unknown client'} on change key '{key}'"


def generic_exception(error: TxError) -> Any:
    """The ``TGenericException`` Tephra sends for ``error``."""
    java_class = TRANSACTION_SIZE if isinstance(error, TransactionSizeError) else ILLEGAL_ARGUMENT
    return tephra.TGenericException(message=str(error), originalExceptionClass=java_class)


def error_from_thrift(exc: BaseException) -> TxError | None:
    """The ``txn`` error a declared Thrift exception stands for; None if it is not one."""
    if isinstance(exc, tephra.TTransactionNotInProgressException):
        return TransactionNotInProgressError(exc.message or "transaction not in progress")
    if isinstance(exc, tephra.TTransactionConflictException):
        return TransactionConflictError(
            conflict_message(exc.transactionId, exc.conflictingKey, exc.conflictingClient),
            transaction_id=exc.transactionId,
            conflicting_key=exc.conflictingKey,
            conflicting_client=exc.conflictingClient,
        )
    if isinstance(exc, tephra.TGenericException):
        if exc.originalExceptionClass == ILLEGAL_ARGUMENT:
            return InvalidArgumentError(exc.message)
        if exc.originalExceptionClass == TRANSACTION_SIZE:
            return TransactionSizeError(exc.message)
        return TxServiceError(f"{exc.originalExceptionClass}: {exc.message}")
    if isinstance(exc, tephra.TTransactionCouldNotTakeSnapshotException):
        return SnapshotUnavailableError(exc.message)
    if isinstance(exc, tephra.TInvalidTruncateTimeException):
        return InvalidTruncateTimeError(exc.message)
    return None
