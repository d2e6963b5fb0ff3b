"""A data manager for the standard ``transaction`` package (``transaction.manager``).

``MessagingDataManager.publish`` joins the current ``transaction`` transaction on first
use and buffers; two-phase commit then runs::

    tpc_begin   start a transaction with the transaction service
    commit      publish the buffers with its write pointer (durable; consumers hold)
    tpc_vote    check the transaction is still in progress (can_commit, no change keys)
    tpc_finish  commit it (retried on transient errors: finish must not fail)
    abort / tpc_abort   roll the publishes back, then abort — or invalidate, if a
                rollback failed or a publish got no definite answer (the service may
                have stored it: ``tms.client.aware.outcome_unknown``) — so nothing
                becomes visible

Outside 2PC, ``abort`` just forgets the buffers. ``sortKey`` orders us after data managers
with plain names (we should finish after the state we announce).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from tms.client.aware import outcome_unknown, send_finished
from tms.client.http import MessagingClient, RollbackToken
from tms.errors import TmsError
from tms.model import TopicId
from txms_common.retry import backoff
from txn.client import TxClient
from txn.errors import TransientTxError
from txn.transaction import Transaction

__all__ = ["MessagingDataManager"]

log = logging.getLogger(__name__)


class MessagingDataManager:
    """An ``IDataManager`` publishing messages transactionally (see the module docstring)."""

    def __init__(
        self,
        client: MessagingClient,
        tx_client: TxClient,
        transaction_manager: Any = None,
        *,
        finish_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if transaction_manager is None:
            import transaction  # noqa: PLC0415 - only needed when joining the default manager

            transaction_manager = transaction.manager
        self.transaction_manager = transaction_manager
        self.client = client
        self.tx_client = tx_client
        self._finish_attempts = finish_attempts
        self._sleep = sleep
        self._joined: Any = None
        self._buffers: dict[TopicId, list[bytes]] = {}
        self._tx: Transaction | None = None
        self._tokens: list[tuple[TopicId, RollbackToken]] = []
        self._in_doubt = False  # a publish may be stored that no token undoes

    def publish(self, topic: TopicId, payloads: Iterable[bytes | str]) -> None:
        current = self.transaction_manager.get()
        if self._joined is not current:
            current.join(self)
            self._joined = current
        data = [p.encode() if isinstance(p, str) else bytes(p) for p in payloads]
        self._buffers.setdefault(topic, []).extend(data)

    # -- IDataManager -------------------------------------------------------------------

    def abort(self, txn: Any) -> None:
        self._rollback()

    def tpc_begin(self, txn: Any) -> None:
        self._tx = self.tx_client.start_short()

    def commit(self, txn: Any) -> None:
        assert self._tx is not None
        for topic, payloads in self._buffers.items():
            try:
                token = self.client.publish(
                    topic, payloads, tx_write_pointer=self._tx.write_pointer
                )
            except BaseException as exc:
                self._in_doubt = self._in_doubt or outcome_unknown(exc)
                raise
            assert token is not None
            self._tokens.append((topic, token))
        self._buffers.clear()

    def tpc_vote(self, txn: Any) -> None:
        assert self._tx is not None
        self.tx_client.can_commit_or_throw(self._tx, [])

    def tpc_finish(self, txn: Any) -> None:
        assert self._tx is not None
        delays = islice(backoff(0.1, 2.0), max(self._finish_attempts - 1, 0))
        while True:
            try:
                self.tx_client.commit_or_throw(self._tx)
                break
            except TransientTxError:
                delay = next(delays, None)
                if delay is None:
                    raise
                self._sleep(delay)
        tokens = list(self._tokens)
        self._clear()
        send_finished(self.client, tokens)

    def tpc_abort(self, txn: Any) -> None:
        self._rollback()

    def sortKey(self) -> str:  # noqa: N802 - the name IDataManager defines
        return f"~tms:{id(self)}"

    # -- helpers ------------------------------------------------------------------------

    def _rollback(self) -> None:
        ok = not self._in_doubt
        for topic, token in self._tokens:
            try:
                self.client.rollback(topic, token)
            except TmsError:
                log.exception("rolling back a publish to %s failed", topic)
                ok = False
        tx = self._tx
        if tx is not None:
            try:
                if ok:
                    self.tx_client.abort(tx)
                else:
                    self.tx_client.invalidate(tx.transaction_id)
            except Exception:
                log.exception("ending transaction %d failed", tx.transaction_id)
        self._clear()

    def _clear(self) -> None:
        self._buffers.clear()
        self._tokens.clear()
        self._in_doubt = False
        self._tx = None
        self._joined = None
