"""``Producer``: publishing from asyncio code, in aiokafka's shapes.

::

    async with Producer("tms://127.0.0.1:15167", tx_server="127.0.0.1:15165") as producer:
        await producer.publish(topic, b"one")                  # durable when it returns
        async with producer.transaction():
            await producer.publish(topic, [b"two", b"three"])  # visible at commit, together

Outside a transaction a publish is acknowledged once durable, and visible to every
consumer at once. Inside ``transaction()`` (a short transaction of the transaction
server named by ``tx_server``) publishes carry its write pointer: transactional
consumers see them when the block ends and the transaction commits, all at once, and
never if it does not. The transaction is the task's: publishes from the block (and the
tasks it starts) join it; other tasks' publishes do not.

When the block raises, every publish of the transaction is rolled back and the
transaction aborted — unless a publish's outcome is unknown (its answer was lost) or a
rollback fails: then the transaction is *invalidated*, so whatever the server stored
stays invisible to transactional consumers (an aborted write pointer would read as
committed). A commit that fails raises after the same clean-up. One whose answer is
lost is never rolled back: it is settled by invalidating the transaction (refused once
it committed) and a fresh snapshot (does it see the transaction?): committed, the block
ends normally; otherwise the error is raised.

Other parties of the transaction (``tms.aio.SubscriptionConsumer``: a subscription's
position written as part of it; ``tms.aio.Queue``: enqueues and acks) ``enlist`` in the
task's transaction: at the block's end their writes are made (``before_commit``) and
their change keys join the conflict check; after the commit they are told
(``after_commit``); when it does not commit, they are rolled back with the publishes (a
rollback that cannot prove itself complete makes the transaction invalidated).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tms.aio.base import Clients
from tms.aio.client import AsyncMessagingClient
from tms.aio.txclient import AsyncTxClient
from tms.client.http import RollbackToken
from tms.errors import ServiceUnavailableError, TmsError, TmsInvalidArgumentError
from tms.model import TopicId
from txn.errors import TxError, TxServiceUnavailableError
from txn.transaction import Transaction

__all__ = ["Participant", "Producer"]

log = logging.getLogger(__name__)


class Participant(Protocol):
    """A party to a producer's transaction (see the module docstring)."""

    def changes(self) -> Collection[bytes]:
        """Its change keys, for the transaction server's conflict check."""
        ...

    async def before_commit(self, tx: Transaction) -> None:
        """Make its writes under ``tx`` (raise: the transaction does not commit)."""

    async def rollback(self, tx: Transaction) -> bool:
        """Undo its writes; False when that is not proven complete."""
        ...

    async def after_commit(self, tx: Transaction) -> None:
        """``tx`` committed: tell whom it concerns (must not raise ``TmsError``: it is
        logged, the commit stands)."""

    def finished(self) -> None:
        """The transaction committed (or was given up): forget it."""


@dataclass
class _Open:
    """A transaction in progress: its publishes' rollback tokens, its other parties."""

    tx: Transaction
    tokens: list[tuple[TopicId, RollbackToken]] = field(default_factory=list)
    participants: list[Participant] = field(default_factory=list)
    unknown: bool = False
    """A publish's outcome is unknown: the server may have stored it."""


class Producer(Clients):
    """See the module docstring. ``client``: share an ``AsyncMessagingClient`` (then
    ``url`` and the connection options are not used, and the client stays open)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        tx_server: str | tuple[str, int] | AsyncTxClient | None = None,
        client: AsyncMessagingClient | None = None,
        **options: Any,
    ) -> None:
        super().__init__(url, tx_server, client, options)
        self._current: contextvars.ContextVar[_Open | None] = contextvars.ContextVar(
            "tms-producer-transaction", default=None
        )

    async def start(self) -> None:
        """Connect now (otherwise the first publish does)."""
        await self.client.ping()

    async def stop(self) -> None:
        await self.close_clients()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def transaction_in_progress(self) -> Transaction | None:
        """The current task's transaction, if it is in one."""
        current = self._current.get()
        return None if current is None else current.tx

    def enlist(self, participant: Participant) -> Transaction:
        """Make ``participant`` a party to the current task's transaction; that
        transaction (``TmsInvalidArgumentError`` outside one)."""
        current = self._current.get()
        if current is None:
            raise TmsInvalidArgumentError("not in a transaction: use producer.transaction()")
        if participant not in current.participants:
            current.participants.append(participant)
        return current.tx

    async def publish(
        self,
        topic: TopicId,
        payloads: bytes | str | Iterable[bytes | str],
        *,
        ttls: Iterable[int | None] | None = None,
    ) -> RollbackToken | None:
        """Publish one message or several (all or none); durable when it returns. In a
        transaction, the rollback token (kept for the transaction's clean-up too)."""
        batch = [payloads] if isinstance(payloads, bytes | str) else payloads
        current = self._current.get()
        if current is None:
            return await self.client.publish(topic, batch, ttls=ttls)
        try:
            token = await self.client.publish(
                topic, batch, tx_write_pointer=current.tx.write_pointer, ttls=ttls
            )
        except ServiceUnavailableError:
            current.unknown = True
            raise
        assert token is not None
        current.tokens.append((topic, token))
        return token

    def send(
        self, topic: TopicId, payloads: bytes | str | Iterable[bytes | str]
    ) -> asyncio.Future[RollbackToken | None]:
        """Publish without waiting (as aiokafka's ``send``): the future resolves once the
        message (or batch) is durable. Outside a transaction only; many sends in flight
        share the producer's connection."""
        if self._current.get() is not None:
            raise TmsInvalidArgumentError("in a transaction, await publish() instead")
        batch = [payloads] if isinstance(payloads, bytes | str) else payloads
        return self.client.publish_nowait(topic, batch)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A short transaction around the block (see the module docstring)."""
        if self.tx_client is None:
            raise TmsInvalidArgumentError("transactions need a tx_server")
        if self._current.get() is not None:
            raise TmsInvalidArgumentError("this task is already in a transaction")
        tx = await self.tx_client.start_short()
        current = _Open(tx)
        reset = self._current.set(current)
        try:
            yield tx
        except BaseException:
            await self._undo(current)
            raise
        finally:
            self._current.reset(reset)
        try:
            for participant in current.participants:
                await participant.before_commit(tx)
            changes = [key for p in current.participants for key in p.changes()]
            await self.tx_client.can_commit_or_throw(tx, changes)
        except BaseException:
            await self._undo(current)
            raise
        try:
            await self.tx_client.commit_or_throw(tx)
        except TxServiceUnavailableError:
            # The answer was lost: it may have committed, so never roll back. Invalidate
            # (refused once committed, and the commit refused once invalid), then look.
            invalidated = False
            with contextlib.suppress(TxError):
                invalidated = await self.tx_client.invalidate(tx.transaction_id)
            if not invalidated and await self._committed(tx):
                await self._after_commit(current)
                return
            self._finished(current)  # invalid: whatever it wrote stays invisible
            raise
        except TxError:
            await self._undo(current)  # not committed (e.g. timed out and invalid)
            raise
        await self._after_commit(current)

    async def _after_commit(self, current: _Open) -> None:
        try:
            for participant in current.participants:
                try:
                    await participant.after_commit(current.tx)
                except TmsError:
                    log.warning("telling a party the transaction committed failed", exc_info=True)
        finally:
            self._finished(current)

    @staticmethod
    def _finished(current: _Open) -> None:
        for participant in current.participants:
            participant.finished()

    async def _committed(self, tx: Transaction) -> bool:
        assert self.tx_client is not None
        try:
            probe = await self.tx_client.start_short()
        except TxError:
            return False
        with contextlib.suppress(TxError):
            await self.tx_client.abort(probe)
        return probe.is_visible(tx.write_pointer)

    async def _undo(self, current: _Open) -> None:
        """Roll back the transaction's publishes; abort it, or invalidate it when that
        cannot be proven complete."""
        assert self.tx_client is not None
        proven = not current.unknown
        for participant in current.participants:
            try:
                proven = await participant.rollback(current.tx) and proven
            except TmsError:
                log.warning("rolling back a party to the transaction failed", exc_info=True)
                proven = False
            finally:
                participant.finished()
        for topic, token in current.tokens:
            try:
                await self.client.rollback(topic, token)
            except TmsError:
                log.warning("rollback of a publish to %s failed", topic, exc_info=True)
                proven = False
        try:
            if proven:
                await self.tx_client.abort(current.tx)
            else:
                await self.tx_client.invalidate(current.tx.transaction_id)
        except TxError:
            log.warning("ending transaction %d failed", current.tx.transaction_id, exc_info=True)
