"""``InProcessTxClient``: a ``TxClient`` that calls a manager in the same process."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from txn.errors import InvalidArgumentError
from txn.manager import DEFAULT_CLIENT_ID, TransactionManager
from txn.persist.snapshot_codec import encode_snapshot
from txn.prune import PrunePlugin, ReportedBounds, TransactionPruner
from txn.state import WritePointerState
from txn.transaction import Transaction

__all__ = ["InProcessTxClient", "manager_pruner"]


def manager_pruner(
    manager: TransactionManager, plugins: Sequence[PrunePlugin] = ()
) -> TransactionPruner:
    """The pruner of a server around ``manager``: the in-process ``plugins`` and the
    participants its configuration names (``prune_participants``), with its lifetime and
    grace."""
    config = manager.config
    return TransactionPruner(
        InProcessTxClient(manager),
        plugins,
        max_lifetime_s=config.max_lifetime_s,
        grace_s=config.prune_grace_s,
        reported=ReportedBounds(config.prune_participants),
        clock=manager.clock,
    )


class InProcessTxClient:
    """See ``txn.client.TxClient``. Like Tephra's in-memory client, an empty change set
    skips the manager call (nothing could conflict)."""

    def __init__(
        self,
        manager: TransactionManager,
        *,
        client_id: str = DEFAULT_CLIENT_ID,
        pruner: TransactionPruner | None = None,
    ) -> None:
        self.manager = manager
        self.client_id = client_id
        self._pruner = pruner

    def start_short(self, timeout_s: int | None = None) -> Transaction:
        return self.manager.start_short(timeout_s, self.client_id)

    def start_long(self) -> Transaction:
        return self.manager.start_long(self.client_id)

    def can_commit_or_throw(self, tx: Transaction, changes: Collection[bytes]) -> None:
        if changes:
            self.manager.can_commit(tx.transaction_id, changes)

    def commit_or_throw(self, tx: Transaction) -> None:
        self.manager.commit(tx.transaction_id, tx.write_pointer)

    def abort(self, tx: Transaction) -> None:
        self.manager.abort(tx)

    def invalidate(self, tx_id: int) -> bool:
        return self.manager.invalidate(tx_id)

    def checkpoint(self, tx: Transaction) -> Transaction:
        return self.manager.checkpoint(tx)

    def extend_timeout(self, tx_id: int, timeout_s: int) -> int:
        return self.manager.extend_timeout(tx_id, timeout_s)

    def get_snapshot(self) -> bytes:
        return encode_snapshot(self.manager.get_snapshot())

    def status(self) -> str:
        return self.manager.status()

    def reset_state(self) -> None:
        self.manager.reset_state()

    def truncate_invalid_tx(self, tx_ids: Iterable[int]) -> bool:
        return self.manager.truncate_invalid_tx(tx_ids)

    def truncate_invalid_tx_before(self, time_ms: int) -> bool:
        return self.manager.truncate_invalid_tx_before(time_ms)

    def invalid_size(self) -> int:
        return self.manager.invalid_size()

    def prune_now(self) -> None:
        if self._pruner is not None:
            self._pruner.run_once()

    def report_prune_upper_bound(self, participant: str, bound: int) -> None:
        """See ``ThriftTxClient.report_prune_upper_bound``."""
        if self._pruner is None:
            raise InvalidArgumentError("invalid-list pruning is not enabled on this server")
        self._pruner.report(participant, bound)

    def write_pointer_state(
        self, pointers: Iterable[int] = (), durable: bool = False
    ) -> WritePointerState:
        return self.manager.write_pointer_state(pointers, durable)

    def close(self) -> None:
        pass
