"""``Transaction`` <-> Tephra's ``TTransaction``, with Tephra's
``TransactionConverterUtils`` rules (missing lists are empty, missing or unknown
visibility is SNAPSHOT, a type other than SHORT is LONG, missing numbers are 0). Errors
cross the boundary in ``txn.rpc.errors``.
"""

from __future__ import annotations

from typing import Any

from txn.codec import THRIFT_TO_VISIBILITY, TYPE_TO_THRIFT, VISIBILITY_TO_THRIFT
from txn.rpc.idl import tephra
from txn.transaction import Transaction, TransactionType, VisibilityLevel

__all__ = ["from_thrift", "to_thrift"]


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
