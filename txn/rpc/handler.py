"""Executes decoded ``TTransactionServer`` calls against a manager
(Tephra's ``TransactionServiceThriftHandler``).

Each call returns a ``Reply``: the method's result struct (or a
``TApplicationException`` for failures the IDL does not declare) and the log ticket that
must be durable before the reply may be sent. Calls in ``BLOCKING`` do I/O or heavy work
and must run off the event loop; they wait for durability themselves (ticket 0). Errors
are answered as ``txn.rpc.errors`` maps them, the one place that knows Tephra's mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from txn.errors import (
    InvalidArgumentError,
    InvalidTruncateTimeError,
    SnapshotUnavailableError,
    TransactionConflictError,
    TransactionNotInProgressError,
    TransactionSizeError,
    TxError,
)
from txn.manager import TransactionManager
from txn.operations import Durable, TxOperations
from txn.persist.snapshot_codec import encode_snapshot
from txn.prune import TransactionPruner
from txn.rpc.convert import from_thrift, to_thrift
from txn.rpc.errors import failure_result, internal_error
from txn.rpc.idl import tephra
from txn.transaction import Transaction

__all__ = ["BLOCKING", "Reply", "TephraHandler"]

log = logging.getLogger(__name__)

S = tephra.TTransactionServer
BLOCKING = frozenset({"getSnapshot", "resetState", "pruneNow"})


@dataclass(slots=True)
class Reply:
    result: Any
    ticket: int


def _tx(ttx: Any) -> Transaction:
    if ttx is None:
        raise InvalidArgumentError("transaction must not be null")
    return from_thrift(ttx)


_CAN_COMMIT_ERRORS = (TransactionNotInProgressError, TransactionConflictError, TransactionSizeError)


class TephraHandler:
    """One method per IDL method, named as in the IDL (see the module docstring)."""

    def __init__(
        self, manager: TransactionManager, pruner: TransactionPruner | None = None
    ) -> None:
        self._mgr = manager
        self._p = manager.pipeline
        self._pruner = pruner
        self._calls: dict[str, Callable[[Any], Reply]] = {
            name: getattr(self, name) for name in S.thrift_services
        }

    @property
    def methods(self) -> frozenset[str]:
        return frozenset(self._calls)

    def handle(self, api: str, args: Any) -> Reply:
        """Run one call; never raises (undeclared failures become TApplicationException)."""
        try:
            return self._calls[api](args)
        except Exception as exc:
            return self.crashed(api, exc)

    @property
    def pipeline(self) -> TxOperations:
        return self._p

    def crashed(self, api: str, exc: Exception) -> Reply:
        """The reply for an exception ``api``'s method did not handle: a ``TxError``
        (e.g. the manager is not running) as ``failure`` maps it, anything else is a bug,
        logged and answered ``TApplicationException(INTERNAL_ERROR)``."""
        if isinstance(exc, TxError):
            return self.failure(api, exc)
        log.exception("internal error in %s", api)
        return Reply(internal_error(exc), self._p.barrier())

    # -- helpers ----------------------------------------------------------------------

    def failure(self, api: str, exc: TxError) -> Reply:
        """The reply for ``exc`` raised by ``api``'s operation (``txn.rpc.errors``). Sent
        only once everything done so far is durable: an error may depend on state that is
        not yet. Shared by the methods below and the hot-call fast path."""
        return Reply(failure_result(api, exc), self._p.barrier())

    def _ok(self, result_type: Any, durable: Durable[Any], value: Any = None) -> Reply:
        return Reply(result_type(success=value), durable.ticket)

    def _start(self, api: str, start: Callable[[], Durable[Transaction]]) -> Reply:
        try:
            d = start()
        except InvalidArgumentError as exc:
            return self.failure(api, exc)
        return Reply(getattr(S, api + "_result")(success=to_thrift(d.value)), d.ticket)

    # -- starting ---------------------------------------------------------------------

    def startLong(self, a: Any) -> Reply:
        d = self._p.start_long()
        return Reply(S.startLong_result(success=to_thrift(d.value)), d.ticket)

    def startShort(self, a: Any) -> Reply:
        d = self._p.start_short()
        return Reply(S.startShort_result(success=to_thrift(d.value)), d.ticket)

    def startShortTimeout(self, a: Any) -> Reply:
        d = self._p.start_short(a.timeout or 0)
        return Reply(S.startShortTimeout_result(success=to_thrift(d.value)), d.ticket)

    def startLongClientId(self, a: Any) -> Reply:
        return self._start("startLongClientId", lambda: self._p.start_long(a.clientId))

    def startShortClientId(self, a: Any) -> Reply:
        return self._start("startShortClientId", lambda: self._p.start_short(None, a.clientId))

    def startShortWithClientIdAndTimeOut(self, a: Any) -> Reply:
        return self._start(
            "startShortWithClientIdAndTimeOut",
            lambda: self._p.start_short(a.timeout or 0, a.clientId),
        )

    def startShortWithTimeout(self, a: Any) -> Reply:
        return self._start("startShortWithTimeout", lambda: self._p.start_short(a.timeout or 0))

    # -- committing -------------------------------------------------------------------

    def canCommitOrThrow(self, a: Any) -> Reply:
        try:
            d = self._p.can_commit(a.tx or 0, a.changes or ())
        except _CAN_COMMIT_ERRORS as exc:
            return self.failure("canCommitOrThrow", exc)
        return Reply(S.canCommitOrThrow_result(), d.ticket)

    def canCommitTx(self, a: Any) -> Reply:
        try:
            d = self._p.can_commit(_tx(a.tx).transaction_id, a.changes or ())
        except _CAN_COMMIT_ERRORS as exc:
            return self.failure("canCommitTx", exc)
        return self._ok(S.canCommitTx_result, d, tephra.TBoolean(value=True))

    def commitOrThrow(self, a: Any) -> Reply:
        try:
            d = self._p.commit(a.txId or 0, a.wp or 0)
        except (TransactionNotInProgressError, TransactionConflictError) as exc:
            return self.failure("commitOrThrow", exc)
        return Reply(S.commitOrThrow_result(), d.ticket)

    def commitTx(self, a: Any) -> Reply:
        tx = _tx(a.tx)
        try:
            d = self._p.commit(tx.transaction_id, tx.write_pointer)
        except (TransactionNotInProgressError, TransactionConflictError) as exc:
            return self.failure("commitTx", exc)
        return self._ok(S.commitTx_result, d, tephra.TBoolean(value=True))

    def abortTx(self, a: Any) -> Reply:
        d = self._p.abort(_tx(a.tx))
        return Reply(S.abortTx_result(), d.ticket)

    def invalidateTx(self, a: Any) -> Reply:
        d = self._p.invalidate(a.tx or 0)
        return self._ok(S.invalidateTx_result, d, d.value)

    def checkpoint(self, a: Any) -> Reply:
        try:
            d = self._p.checkpoint(_tx(a.tx))
        except TransactionNotInProgressError as exc:
            return self.failure("checkpoint", exc)
        return self._ok(S.checkpoint_result, d, to_thrift(d.value))

    def extendTimeout(self, a: Any) -> Reply:
        try:
            d = self._p.extend_timeout(a.tx or 0, a.timeout or 0)
        except (TransactionNotInProgressError, InvalidArgumentError) as exc:
            return self.failure("extendTimeout", exc)
        return self._ok(S.extendTimeout_result, d, d.value)

    # -- invalid list -----------------------------------------------------------------

    def truncateInvalidTx(self, a: Any) -> Reply:
        d = self._p.truncate_invalid_tx(a.txns or ())
        return self._ok(S.truncateInvalidTx_result, d, tephra.TBoolean(value=d.value))

    def truncateInvalidTxBefore(self, a: Any) -> Reply:
        try:
            d = self._p.truncate_invalid_tx_before(a.time or 0)
        except InvalidTruncateTimeError as exc:
            return self.failure("truncateInvalidTxBefore", exc)
        return self._ok(S.truncateInvalidTxBefore_result, d, tephra.TBoolean(value=d.value))

    def invalidTxSize(self, a: Any) -> Reply:
        d = self._p.invalid_size()
        return self._ok(S.invalidTxSize_result, d, d.value)

    def writePointerState(self, a: Any) -> Reply:
        d = self._p.write_pointer_state(a.writePointers or (), bool(a.durable))
        state = tephra.TWritePointerState(
            writePointer=d.value.write_pointer,
            inProgress=sorted(d.value.in_progress),
            invalid=sorted(d.value.invalid),
        )
        return Reply(S.writePointerState_result(success=state), d.ticket)

    def pruneNow(self, a: Any) -> Reply:
        if self._pruner is None:
            log.info("pruneNow: invalid-list pruning is not enabled")
        else:
            self._pruner.run_once()
        return Reply(S.pruneNow_result(), 0)

    def reportPruneUpperBound(self, a: Any) -> Reply:
        try:
            if self._pruner is None:
                raise InvalidArgumentError("invalid-list pruning is not enabled on this server")
            if a.participant is None:
                raise InvalidArgumentError("participant must not be null")
            self._pruner.report(a.participant, a.bound or 0)
        except InvalidArgumentError as exc:
            return self.failure("reportPruneUpperBound", exc)
        return Reply(S.reportPruneUpperBound_result(), self._p.barrier())

    # -- state ------------------------------------------------------------------------

    def getSnapshot(self, a: Any) -> Reply:
        try:
            data = encode_snapshot(self._mgr.get_snapshot())
        except SnapshotUnavailableError as exc:
            return Reply(failure_result("getSnapshot", exc), 0)
        return Reply(S.getSnapshot_result(success=data), 0)

    def resetState(self, a: Any) -> Reply:
        self._mgr.reset_state()
        return Reply(S.resetState_result(), 0)

    def status(self, a: Any) -> Reply:
        return Reply(S.status_result(success=self._mgr.status()), 0)
