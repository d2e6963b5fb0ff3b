"""Tephra's scenarios through a client that Apache Thrift's compiler generated from the
IDL, on Apache Thrift's own Python library: start, commit, conflict, abort, invalidate,
truncate, checkpoint, snapshot, and the declared exceptions.

Run by ``python -m tests.interop`` (which generates the client); by hand::

    python -m tests.interop.scenarios GEN_PY_DIR HOST PORT [pure|accelerated]
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from typing import Any


def expect(error: type[Exception], call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` must raise ``error``; returns the exception."""
    try:
        call(*args)
    except error as e:
        return e
    raise AssertionError(f"{call.__name__}{args} did not raise {error.__name__}")


def run(c: Any, t: Any) -> None:
    """All scenarios against client ``c`` with the generated types module ``t``."""
    assert c.status() == "OK"

    # start and commit
    tx = c.startShort()
    assert tx.type == t.TTransactionType.SHORT and tx.writePointer == tx.transactionId, tx
    assert tx.visibilityLevel == t.TVisibilityLevel.SNAPSHOT, tx
    c.canCommitOrThrow(tx.transactionId, {b"row1"})
    c.commitOrThrow(tx.transactionId, tx.writePointer)
    tx2 = c.startShortClientId("generated-python")
    assert tx2.transactionId > tx.transactionId and tx.transactionId not in tx2.inProgress
    assert tx2.readPointer >= tx.transactionId
    assert c.commitTx(tx2).value is True

    # conflict: the second writer of a key loses, through both the new and the old call
    a = c.startShortWithTimeout(30)
    b = c.startShortWithClientIdAndTimeOut("loser", 30)
    c.canCommitOrThrow(a.transactionId, {b"k"})
    c.commitOrThrow(a.transactionId, a.writePointer)
    e = expect(t.TTransactionConflictException, c.canCommitOrThrow, b.transactionId, {b"k"})
    assert e.transactionId == b.transactionId and e.conflictingKey, e
    assert c.canCommitTx(b, {b"k"}).value is False

    # abort, then the transaction is gone
    c.abortTx(b)
    e = expect(
        t.TTransactionNotInProgressException, c.commitOrThrow, b.transactionId, b.writePointer
    )
    assert e.message, e
    expect(t.TTransactionNotInProgressException, c.canCommitOrThrow, 12345, {b"x"})
    expect(t.TTransactionNotInProgressException, c.canCommitTx, b, {b"x"})

    # a bad argument is Tephra's TGenericException with the Java class name
    e = expect(t.TGenericException, c.startShortWithTimeout, -1)
    assert e.originalExceptionClass == "java.lang.IllegalArgumentException", e

    # aborting a long transaction invalidates it
    size0 = c.invalidTxSize()
    long_tx = c.startLongClientId("long-client")
    assert long_tx.type == t.TTransactionType.LONG, long_tx
    c.abortTx(long_tx)
    assert c.invalidTxSize() == size0 + 1
    later = c.startShortTimeout(10)
    assert long_tx.transactionId in later.invalids, later

    # invalidate: once true, then false
    assert c.invalidateTx(later.transactionId) is True
    assert c.invalidateTx(later.transactionId) is False
    assert c.invalidTxSize() == size0 + 2

    # truncate by ids, and before a time (refused while an older transaction runs)
    assert c.truncateInvalidTx({long_tx.transactionId}).value is True
    assert c.invalidTxSize() == size0 + 1
    running = c.startShort()
    cutoff = int(time.time() * 1000) + 1000
    e = expect(t.TInvalidTruncateTimeException, c.truncateInvalidTxBefore, cutoff)
    assert e.message, e
    c.abortTx(running)
    assert c.truncateInvalidTxBefore(cutoff).value is True
    assert c.invalidTxSize() == 0

    # checkpoint: a new write pointer, committed under it
    first = c.startShort()
    cp = c.checkpoint(first)
    assert cp.transactionId == first.transactionId and cp.writePointer > first.writePointer
    assert cp.checkpointWritePointers == [cp.writePointer], cp
    c.canCommitOrThrow(cp.transactionId, {b"c"})
    c.commitOrThrow(cp.transactionId, cp.writePointer)
    expect(t.TTransactionNotInProgressException, c.checkpoint, first)

    # snapshot, prune, reset
    snapshot = c.getSnapshot()
    assert isinstance(snapshot, bytes) and len(snapshot) > 8
    c.pruneNow()
    c.resetState()
    assert c.invalidTxSize() == 0 and c.status() == "OK"

    for _ in range(100):
        x = c.startShort()
        c.canCommitOrThrow(x.transactionId, set())
        c.commitOrThrow(x.transactionId, x.writePointer)


def main(argv: list[str]) -> None:
    gen_dir, host, port = argv[0], argv[1], int(argv[2])
    accelerated = len(argv) > 3 and argv[3] == "accelerated"
    sys.path.insert(0, gen_dir)
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    service = importlib.import_module("transaction.TTransactionServer")
    types = importlib.import_module("transaction.ttypes")
    transport = TTransport.TFramedTransport(TSocket.TSocket(host, port))
    protocol_class = (
        TBinaryProtocol.TBinaryProtocolAccelerated
        if accelerated
        else TBinaryProtocol.TBinaryProtocol
    )
    transport.open()
    try:
        run(service.Client(protocol_class(transport)), types)
    finally:
        transport.close()
    mode = "accelerated" if accelerated else "pure"
    print(f"generated Python client ({mode}): all scenarios passed")


if __name__ == "__main__":
    main(sys.argv[1:])
