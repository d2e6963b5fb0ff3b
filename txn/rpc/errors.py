"""The one boundary between ``txn`` errors and the exceptions Tephra's IDL declares, in both
directions.

Server side (``failure_result``), as Tephra's ``TransactionServiceThriftHandler`` maps:

* the client-id and timeout start methods send an argument error as
  ``TGenericException(message, "java.lang.IllegalArgumentException")``; ``startShort``,
  ``startLong`` and the deprecated ``startShortTimeout`` declare nothing;
* ``canCommitOrThrow``: not in progress, conflict, and an oversized change set as
  ``TGenericException(..., "org.apache.tephra.TransactionSizeException")``;
  ``commitOrThrow``: not in progress and conflict;
* the deprecated ``canCommitTx``/``commitTx`` answer ``TBoolean(false)`` on a conflict or
  size error;
* ``checkpoint``: not in progress; ``truncateInvalidTxBefore``: an invalid truncate time;
  ``getSnapshot``: no snapshot; ``reportPruneUpperBound`` (txms's extension): an argument
  error; ``extendTimeout`` (txms's extension): not in progress, an argument error;
* anything a method does not declare (e.g. "Transaction Manager is not running.") becomes
  ``TApplicationException(INTERNAL_ERROR)``; Tephra drops the connection instead, which
  its clients treat the same way (retry).

Client side (``error_from_thrift``): every exception the IDL declares back into the
``txn`` error it stands for. ``DECLARED`` lists, per method, the errors the server maps to
a declared answer; a test checks both directions against the IDL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thriftpy2.thrift import TApplicationException

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

__all__ = [
    "DECLARED",
    "ILLEGAL_ARGUMENT",
    "NEVER_SENT",
    "TRANSACTION_SIZE",
    "conflict_message",
    "error_from_thrift",
    "failure_result",
    "generic_exception",
    "internal_error",
]

S = tephra.TTransactionServer
ILLEGAL_ARGUMENT = "java.lang.IllegalArgumentException"
TRANSACTION_SIZE = "org.apache.tephra.TransactionSizeException"
_FALSE = tephra.TBoolean(value=False)

# -- server side ------------------------------------------------------------------------


def generic_exception(error: TxError) -> Any:
    """The ``TGenericException`` Tephra sends for ``error``."""
    java_class = TRANSACTION_SIZE if isinstance(error, TransactionSizeError) else ILLEGAL_ARGUMENT
    return tephra.TGenericException(message=str(error), originalExceptionClass=java_class)


def _not_in_progress(exc: TxError) -> Any:
    return tephra.TTransactionNotInProgressException(message=str(exc))


def _conflict(exc: TxError) -> Any:
    assert isinstance(exc, TransactionConflictError)
    return tephra.TTransactionConflictException(
        transactionId=exc.transaction_id,
        conflictingKey=exc.conflicting_key,
        conflictingClient=exc.conflicting_client,
    )


_Answer = Callable[[Any, TxError], Any]
"""(the method's result type, the error) -> its declared answer."""

_START: dict[type[TxError], _Answer] = {
    InvalidArgumentError: lambda r, e: r(e=generic_exception(e)),
}
_OR_THROW: dict[type[TxError], _Answer] = {
    TransactionNotInProgressError: lambda r, e: r(e=_not_in_progress(e)),
    TransactionConflictError: lambda r, e: r(c=_conflict(e)),
}
_DEPRECATED: dict[type[TxError], _Answer] = {
    TransactionNotInProgressError: lambda r, e: r(e=_not_in_progress(e)),
    TransactionConflictError: lambda r, e: r(success=_FALSE),
}

DECLARED: dict[str, dict[type[TxError], _Answer]] = {
    "startLongClientId": _START,
    "startShortClientId": _START,
    "startShortWithClientIdAndTimeOut": _START,
    "startShortWithTimeout": _START,
    "canCommitOrThrow": {
        **_OR_THROW,
        TransactionSizeError: lambda r, e: r(g=generic_exception(e)),
    },
    "canCommitTx": {**_DEPRECATED, TransactionSizeError: lambda r, e: r(success=_FALSE)},
    "commitOrThrow": _OR_THROW,
    "commitTx": _DEPRECATED,
    "checkpoint": {TransactionNotInProgressError: lambda r, e: r(e=_not_in_progress(e))},
    "extendTimeout": {
        TransactionNotInProgressError: lambda r, e: r(e=_not_in_progress(e)),
        InvalidArgumentError: lambda r, e: r(g=generic_exception(e)),
    },
    "truncateInvalidTxBefore": {
        InvalidTruncateTimeError: lambda r, e: r(
            e=tephra.TInvalidTruncateTimeException(message=str(e))
        )
    },
    "getSnapshot": {
        SnapshotUnavailableError: lambda r, e: r(
            e=tephra.TTransactionCouldNotTakeSnapshotException(message=str(e))
        )
    },
    "reportPruneUpperBound": {InvalidArgumentError: lambda r, e: r(g=generic_exception(e))},
}
"""Per method: the errors it declares, and how each is answered (its result struct)."""

NEVER_SENT = {("commitOrThrow", "g")}
"""Exception fields the IDL declares that are never sent: Tephra's ``commitOrThrow``
declares ``TGenericException g`` and never throws it (nor do we)."""


def failure_result(api: str, exc: TxError) -> Any:
    """The answer to ``api`` whose operation raised ``exc``: the result struct carrying
    the exception (or false ``TBoolean``) the IDL declares for it, else
    ``TApplicationException(INTERNAL_ERROR)``."""
    for error_type, answer in DECLARED.get(api, {}).items():
        if isinstance(exc, error_type):
            return answer(getattr(S, api + "_result"), exc)
    return TApplicationException(TApplicationException.INTERNAL_ERROR, str(exc))


def internal_error(exc: BaseException) -> TApplicationException:
    """The answer to a call that failed with a bug (not a ``TxError``)."""
    return TApplicationException(TApplicationException.INTERNAL_ERROR, f"internal error: {exc!r}")


# -- client side ------------------------------------------------------------------------


def conflict_message(tx_id: int, key: str | None, client: str | None) -> str:
    return f"Transaction {tx_id} conflicts with {client or 'unknown client'} on change key '{key}'"


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
