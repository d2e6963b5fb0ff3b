"""``SubscriptionConsumer``: exactly-once consume → process → publish from asyncio code,
with a ``Producer``'s transaction (``tms.client.consumer.SubscriptionConsumer``'s rules).

::

    consumer = SubscriptionConsumer(producer, SubscriptionId(orders, "billing"))
    async with producer.transaction():
        for message in await consumer.getmany(100):
            await producer.publish(invoices, bill(message.payload))

Inside ``producer.transaction()``, ``getmany`` reads from the subscription's position as
of the transaction's snapshot, then on from where the last ``getmany`` of the same
transaction ended (a transactional subscription: committed messages only, stopping at
the first uncommitted one, ``held``). At the block's end the new position is written
under the transaction's write pointer (``commit_in_transaction``, a binary request) and
the subscription's change key joins the conflict check: of two overlapping transactions
that read it, at most one commits (the other raises ``TransactionConflictError``: run
the block again). The position becomes the subscription's when the transaction
commits; if it does not, the write is rolled back with the publishes, and when its
outcome is unknown the transaction is invalidated instead of aborted. So each input's
outputs are published exactly once as seen by transactional readers.
"""

from __future__ import annotations

from collections.abc import Collection

from tms.aio.producer import Producer
from tms.client.aware import outcome_unknown
from tms.errors import TmsError
from tms.ids import MessageId
from tms.model import Message
from tms.positions import change_key
from tms.subscription import SubscriptionId
from txn.transaction import Transaction

__all__ = ["SubscriptionConsumer"]


class SubscriptionConsumer:
    """See the module docstring. One transaction at a time."""

    def __init__(self, producer: Producer, subscription: SubscriptionId) -> None:
        self.producer = producer
        self.client = producer.client
        self.subscription = subscription
        self.finished()

    def finished(self) -> None:
        self._tx: Transaction | None = None
        self._next: MessageId | None = None
        self._start: MessageId | None = None  # the position as of the transaction's start
        self._version: int | None = None
        self._written = False
        self._in_doubt = False
        self.held = False
        """The last read stopped at a transaction this one cannot see: end this one and
        read on in a new one."""
        self.held_finished = False

    @property
    def position(self) -> MessageId | None:
        """Where the next ``getmany`` of this transaction starts (None before the first)."""
        return self._next

    async def getmany(self, limit: int = 100, *, wait_ms: int = 0) -> list[Message]:
        """Up to ``limit`` messages from the position (see the module docstring)."""
        tx = self.producer.enlist(self)
        if self._tx is not tx:
            self.finished()
            self._tx = tx
        batch = await self.client.poll_subscription(
            self.subscription, start=self._next, limit=limit, transaction=tx, wait_ms=wait_ms
        )
        if self._start is None:
            self._start, self._version = batch.start, batch.version
        self._next = batch.position
        self.held, self.held_finished = batch.held, batch.held_finished
        return batch.messages

    def _moved(self) -> bool:
        return self._next is not None and self._next != self._start

    # -- Participant (tms.aio.producer) ---------------------------------------------------

    def changes(self) -> Collection[bytes]:
        return [change_key(self.subscription)] if self._moved() else []

    async def before_commit(self, tx: Transaction) -> None:
        if not self._moved():
            return
        assert self._next is not None and self._version is not None
        self._written = True
        try:
            await self.client.commit_in_transaction(
                self.subscription, self._next, self._version, tx
            )
        except BaseException as exc:
            self._in_doubt = self._in_doubt or outcome_unknown(exc)
            raise

    async def after_commit(self, tx: Transaction) -> None:
        pass  # the position is the subscription's once the transaction committed

    async def rollback(self, tx: Transaction) -> bool:
        if not self._written:
            return not self._in_doubt
        try:
            await self.client.rollback_positions(self.subscription, [tx.write_pointer])
        except TmsError:
            return False
        return not self._in_doubt
