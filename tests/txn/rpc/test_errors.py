"""The Thrift error boundary (``txn.rpc.errors``), both directions, checked against the IDL:
every exception the IDL declares maps to a ``txn`` error, every exception field a method
declares is one the server answers with, and each such answer reads back as the error
that caused it."""

from __future__ import annotations

import pytest
from thriftpy2.thrift import TApplicationException

from txn.errors import (
    InvalidArgumentError,
    InvalidTruncateTimeError,
    ManagerNotRunningError,
    SnapshotUnavailableError,
    TransactionConflictError,
    TransactionNotInProgressError,
    TransactionSizeError,
    TxError,
    TxServiceError,
)
from txn.rpc.errors import (
    DECLARED,
    NEVER_SENT,
    error_from_thrift,
    failure_result,
    generic_exception,
)
from txn.rpc.idl import tephra

S = tephra.TTransactionServer

# Every exception the IDL declares, and the txn error it means.
THRIFT_TO_TXN = [
    (tephra.TTransactionNotInProgressException(message="m"), TransactionNotInProgressError),
    (
        tephra.TTransactionConflictException(
            transactionId=1, conflictingKey="k", conflictingClient="c"
        ),
        TransactionConflictError,
    ),
    (
        tephra.TGenericException(
            message="m", originalExceptionClass="java.lang.IllegalArgumentException"
        ),
        InvalidArgumentError,
    ),
    (
        tephra.TGenericException(
            message="m", originalExceptionClass="org.apache.tephra.TransactionSizeException"
        ),
        TransactionSizeError,
    ),
    (
        tephra.TGenericException(message="m", originalExceptionClass="java.lang.Other"),
        TxServiceError,
    ),
    (tephra.TTransactionCouldNotTakeSnapshotException(message="m"), SnapshotUnavailableError),
    (tephra.TInvalidTruncateTimeException(message="m"), InvalidTruncateTimeError),
]


def an_error(error_type: type[TxError]) -> TxError:
    if error_type is TransactionConflictError:
        return TransactionConflictError(
            "x", transaction_id=7, conflicting_key="k", conflicting_client="c"
        )
    return error_type(f"a {error_type.__name__}")


@pytest.mark.parametrize(("thrift_exc", "error_class"), THRIFT_TO_TXN)
def test_every_declared_exception_maps_to_a_txn_error(
    thrift_exc: object, error_class: type[TxError]
) -> None:
    mapped = error_from_thrift(thrift_exc)  # type: ignore[arg-type]
    assert type(mapped) is error_class


def test_every_exception_class_of_the_idl_is_covered() -> None:
    declared = {type(e).__name__ for e, _ in THRIFT_TO_TXN}
    in_idl = {name for name in dir(tephra) if name.endswith("Exception") and name.startswith("T")}
    assert declared == in_idl


def declared_fields(api: str) -> set[str]:
    """The exception fields ``api``'s result struct has in the IDL."""
    spec = getattr(S, api + "_result").thrift_spec
    return {field[1] for field_id, field in spec.items() if field_id != 0}


def test_every_declared_exception_field_is_one_the_server_answers_with() -> None:
    for api in S.thrift_services:
        used = set()
        for error_type in DECLARED.get(api, {}):
            result = failure_result(api, an_error(error_type))
            used |= {name for name in declared_fields(api) if getattr(result, name) is not None}
        never = {name for method, name in NEVER_SENT if method == api}
        assert used == declared_fields(api) - never, api


@pytest.mark.parametrize(
    ("api", "error_type"),
    [(api, error_type) for api, answers in DECLARED.items() for error_type in answers],
)
def test_each_declared_answer_reads_back_as_its_error(api: str, error_type: type[TxError]) -> None:
    error = an_error(error_type)
    result = failure_result(api, error)
    carried = [getattr(result, name) for name in declared_fields(api)]
    carried = [exc for exc in carried if exc is not None]
    if not carried:  # the deprecated methods answer a conflict or size error with false
        assert api in ("canCommitTx", "commitTx") and result.success.value is False
        return
    (exc,) = carried
    back = error_from_thrift(exc)
    assert type(back) is error_type
    if isinstance(back, TransactionConflictError):
        assert isinstance(error, TransactionConflictError)
        assert (back.transaction_id, back.conflicting_key, back.conflicting_client) == (7, "k", "c")
        assert str(back) == "Transaction 7 conflicts with c on change key 'k'"
    else:
        assert str(back) == str(error)


def test_undeclared_errors_become_internal_errors() -> None:
    result = failure_result("startShort", InvalidArgumentError("bad"))
    assert isinstance(result, TApplicationException)
    assert result.type == TApplicationException.INTERNAL_ERROR
    stopped = failure_result("canCommitOrThrow", ManagerNotRunningError("stopped"))
    assert isinstance(stopped, TApplicationException) and stopped.message == "stopped"


def test_generic_exception_names_the_java_class() -> None:
    size = generic_exception(TransactionSizeError("big"))
    assert size.originalExceptionClass == "org.apache.tephra.TransactionSizeException"
    assert generic_exception(InvalidArgumentError("x")).originalExceptionClass == (
        "java.lang.IllegalArgumentException"
    )


def test_non_thrift_exceptions_are_not_mapped() -> None:
    assert error_from_thrift(ValueError("x")) is None
