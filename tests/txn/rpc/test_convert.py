"""The Thrift boundary: Transaction <-> TTransaction and errors in both directions."""

from __future__ import annotations

import pytest
from hypothesis import given
from thriftpy2.utils import serialize

from tests.txn.test_codec import transactions
from txn.codec import encode_transaction
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
from txn.rpc.convert import error_from_thrift, from_thrift, generic_exception, to_thrift
from txn.rpc.handler import _conflict, _not_in_progress
from txn.rpc.idl import tephra
from txn.transaction import Transaction, TransactionType, VisibilityLevel


@given(transactions)
def test_round_trip_and_same_bytes_as_the_codec(tx: Transaction) -> None:
    ttx = to_thrift(tx)
    assert from_thrift(ttx) == tx
    assert serialize(ttx) == encode_transaction(tx)


def test_partial_ttransaction_takes_tephra_defaults() -> None:
    tx = from_thrift(tephra.TTransaction(transactionId=5))
    assert tx.transaction_id == 5 and tx.read_pointer == 0 and tx.write_pointer == 0
    assert tx.type is TransactionType.LONG and tx.visibility_level is VisibilityLevel.SNAPSHOT
    assert tx.invalids == tx.in_progress == tx.checkpoint_write_pointers == ()


# Every exception the IDL declares, and the txn error it means.
DECLARED = [
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


@pytest.mark.parametrize(("thrift_exc", "error_class"), DECLARED)
def test_every_declared_exception_maps_to_a_txn_error(
    thrift_exc: object, error_class: type[TxError]
) -> None:
    mapped = error_from_thrift(thrift_exc)  # type: ignore[arg-type]
    assert type(mapped) is error_class


def test_every_exception_class_of_the_idl_is_covered() -> None:
    declared = {type(e).__name__ for e, _ in DECLARED}
    in_idl = {name for name in dir(tephra) if name.endswith("Exception") and name.startswith("T")}
    assert declared == in_idl


def test_server_side_mapping_round_trips() -> None:
    conflict = TransactionConflictError(
        "x", transaction_id=7, conflicting_key="k", conflicting_client="c"
    )
    back = error_from_thrift(_conflict(conflict))
    assert isinstance(back, TransactionConflictError)
    assert (back.transaction_id, back.conflicting_key, back.conflicting_client) == (7, "k", "c")
    assert str(back) == "Transaction 7 conflicts with c on change key 'k'"
    nip = error_from_thrift(_not_in_progress(TransactionNotInProgressError("gone")))
    assert isinstance(nip, TransactionNotInProgressError) and str(nip) == "gone"
    for err in (InvalidArgumentError("bad"), TransactionSizeError("big")):
        back_err = error_from_thrift(generic_exception(err))
        assert type(back_err) is type(err) and str(back_err) == str(err)


def test_non_thrift_exceptions_are_not_mapped() -> None:
    assert error_from_thrift(ValueError("x")) is None
