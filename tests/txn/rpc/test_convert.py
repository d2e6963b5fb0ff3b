"""The Thrift boundary for values: Transaction <-> TTransaction (errors: test_errors.py)."""

from __future__ import annotations

from hypothesis import given
from thriftpy2.utils import serialize

from tests.txn.test_codec import transactions
from txn.codec import encode_transaction
from txn.rpc.convert import from_thrift, to_thrift
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
