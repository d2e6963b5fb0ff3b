"""Transaction-aware publishing and fetching over the REST API (``txn.TransactionAware``).

``TransactionalPublisher``:

* outside a transaction, ``publish`` publishes at once;
* inside one (after ``start_tx``) it buffers, and ``commit_tx`` — called by the
  ``TransactionContext`` before the transaction commits — publishes each topic's buffer
  with the transaction's write pointer. Transactional consumers stop before those
  messages until the transaction commits, then see them all at once; if anything fails,
  ``rollback_tx`` rolls them back so they are never visible;
* ``staged=True`` is for long transactions with many messages: ``publish`` stores them in
  the payload table at once (nothing held in memory) and ``commit_tx`` publishes one
  commit marker per topic and write pointer. On rollback the markers are rolled back
  and the staged payloads age out.

Message topics are append-only, so neither participant declares change keys (no
conflicts). After a checkpoint both continue under the new write pointer.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from tms.client.http import MessagingClient, PollResult, RollbackToken
from tms.errors import TmsError
from tms.ids import MessageId
from tms.model import TopicId
from txn.transaction import Transaction

__all__ = ["TransactionalFetcher", "TransactionalPublisher"]


class TransactionalPublisher:
    """See the module docstring."""

    def __init__(
        self, client: MessagingClient, *, staged: bool = False, name: str = "tms-publisher"
    ) -> None:
        self.client = client
        self.staged = staged
        self.name = name
        self._tx: Transaction | None = None
        self._buffers: dict[TopicId, list[bytes]] = {}
        self._staged: set[tuple[TopicId, int]] = set()
        self._tokens: list[tuple[TopicId, RollbackToken]] = []

    @property
    def transaction(self) -> Transaction | None:
        return self._tx

    def publish(self, topic: TopicId, payloads: Iterable[bytes | str]) -> None:
        """Publish now (no transaction), or as part of the current transaction."""
        data = [p.encode() if isinstance(p, str) else bytes(p) for p in payloads]
        tx = self._tx
        if tx is None:
            self.client.publish(topic, data)
        elif self.staged:
            self.client.store(topic, data, tx_write_pointer=tx.write_pointer)
            self._staged.add((topic, tx.write_pointer))
        else:
            self._buffers.setdefault(topic, []).extend(data)

    # -- TransactionAware ---------------------------------------------------------------

    def start_tx(self, tx: Transaction) -> None:
        self._tx = tx
        self._buffers.clear()
        self._staged.clear()
        self._tokens.clear()

    def update_tx(self, tx: Transaction) -> None:
        self._tx = tx  # a checkpoint: commit_tx already published what came before

    def get_tx_changes(self) -> Collection[bytes]:
        return ()

    def commit_tx(self) -> bool:
        tx = self._tx
        if tx is None:
            return True
        for topic, payloads in list(self._buffers.items()):
            token = self.client.publish(topic, payloads, tx_write_pointer=tx.write_pointer)
            assert token is not None
            self._tokens.append((topic, token))
            del self._buffers[topic]
        for topic, write_pointer in sorted(self._staged, key=lambda k: (str(k[0]), k[1])):
            token = self.client.publish(topic, [], tx_write_pointer=write_pointer)
            assert token is not None
            self._tokens.append((topic, token))
        self._staged.clear()
        return True

    def post_tx_commit(self) -> None:
        self._reset()

    def rollback_tx(self) -> bool:
        ok = True
        try:
            for topic, token in self._tokens:
                try:
                    self.client.rollback(topic, token)
                except TmsError:
                    ok = False
        finally:
            self._reset()
        return ok

    def transaction_aware_name(self) -> str:
        return self.name

    def _reset(self) -> None:
        self._tx = None
        self._buffers.clear()
        self._staged.clear()
        self._tokens.clear()


class TransactionalFetcher:
    """Reads with the current transaction (everything, outside one)."""

    def __init__(self, client: MessagingClient, *, name: str = "tms-fetcher") -> None:
        self.client = client
        self.name = name
        self._tx: Transaction | None = None

    def fetch(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        limit: int | None = None,
        wait_ms: int = 0,
    ) -> PollResult:
        return self.client.poll(
            topic,
            start=start,
            inclusive=inclusive,
            limit=limit,
            transaction=self._tx,
            wait_ms=wait_ms,
        )

    def start_tx(self, tx: Transaction) -> None:
        self._tx = tx

    def update_tx(self, tx: Transaction) -> None:
        self._tx = tx

    def get_tx_changes(self) -> Collection[bytes]:
        return ()

    def commit_tx(self) -> bool:
        return True

    def post_tx_commit(self) -> None:
        self._tx = None

    def rollback_tx(self) -> bool:
        self._tx = None
        return True

    def transaction_aware_name(self) -> str:
        return self.name
