"""``Subscriber``: a subscription's messages from asyncio code, committing as it goes
(at-least-once; ``tms.client.subscriber.Subscriber``'s rules).

::

    async with Subscriber("tms://127.0.0.1:15167", SubscriptionId(topic, "mailer")) as sub:
        async for message in sub:      # long-polls for new ones
            await send(message)        # processed once the loop asks for the next one

It starts at the subscription's stored position. A message counts as processed when
the iteration asks for the one after it (``getmany``: the whole batch it returned, when
it is called again; ``commit(through=message)``: at once); the position after the
processed messages is committed at most every ``commit_interval_s`` (0: at every poll),
riding on the next poll (one binary request), and by ``commit()`` and ``stop()``.
After a crash the messages after the last commit are delivered again — at least once,
never skipped. When a commit finds the subscription changed (``BadVersionError``: a
seek, or another consumer), it reads it again and goes on from its stored position.
A poll whose commit was written but whose read failed, and a poll with a commit that
got no answer, are handled as the sync ``Subscriber`` does (no ``BadVersionError`` met
for its own commit), and so is ``commit_later`` (commits riding on polls answered before
they are durable; ``commit()`` and ``stop()`` make the last one durable).
A transactional subscription is read with short transactions of ``tx_server``, each
used for at most ``tx_refresh_s`` and replaced at once when a read is held behind one
that finished. Its polls ask the service to ``reread``: a poll held behind a
transaction in progress answers that transaction's messages as soon as it commits, in
the same request; the transaction is then replaced before the next poll or commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any

from tms.aio.base import Clients
from tms.aio.client import AsyncMessagingClient
from tms.aio.txclient import AsyncTxClient
from tms.client.subcore import Cursor
from tms.client.subscriptions import SubscriptionInfo
from tms.errors import BadVersionError, ServiceUnavailableError
from tms.ids import MessageId
from tms.model import Message
from tms.subscription import SubscriptionId, after
from txn.errors import TxError
from txn.transaction import Transaction

__all__ = ["Subscriber"]

log = logging.getLogger(__name__)


class Subscriber(Clients):
    """See the module docstring. ``client``: share an ``AsyncMessagingClient``."""

    def __init__(
        self,
        url: str | None,
        subscription: SubscriptionId,
        *,
        tx_server: str | tuple[str, int] | AsyncTxClient | None = None,
        batch: int = 100,
        wait_ms: int = 10_000,
        commit_interval_s: float = 1.0,
        commit_later: bool = False,
        tx_refresh_s: float = 1.0,
        client: AsyncMessagingClient | None = None,
        **options: Any,
    ) -> None:
        super().__init__(url, tx_server, client, options)
        self.subscription = subscription
        self._batch = batch
        self._wait_ms = wait_ms
        self._commit_later = commit_later
        self._tx_refresh_s = tx_refresh_s
        self._buffer: deque[Message] = deque()
        self._last: Message | None = None  # delivered by the iteration, not yet processed
        self._batch_end: MessageId | None = None  # where the batch being delivered ends
        self._cursor = Cursor(commit_interval_s, time.monotonic())
        self._tx: Transaction | None = None
        self._tx_started = 0.0
        self._started = False

    async def start(self) -> None:
        """Read the subscription's position (otherwise the first read does)."""
        if not self._started:
            await self._reload()
            self._started = True

    async def _recover(self) -> None:
        """After a poll that carried a commit got no answer: whether the commit was
        written (the record holds its position under a newer version: go on from it,
        no ``bad_version`` to meet), else as ``_reload`` when someone else moved it."""
        info = await self.client.get_subscription(self.subscription)
        if self._cursor.recovered(info, time.monotonic()):
            await self._reload(info)

    async def _reload(self, info: SubscriptionInfo | None = None) -> None:
        if info is None:
            info = await self.client.get_subscription(self.subscription)
        if self._started:
            log.warning(
                "subscription %s changed (now at %s, version %d): going on from there",
                self.subscription,
                info.position.hex,
                info.version,
            )
        self._cursor.reloaded(info, time.monotonic())
        self._buffer.clear()
        self._last = self._batch_end = None

    @property
    def committed(self) -> MessageId:
        """The position last committed."""
        return self._cursor.committed

    def _settle(self) -> None:
        """Count what was delivered as processed."""
        if self._last is not None:
            self._cursor.processed(after(self._last.id))
            self._last = None
        if not self._buffer and self._batch_end is not None:
            self._cursor.processed(self._batch_end)
            self._batch_end = None

    def __aiter__(self) -> Subscriber:
        return self

    async def __anext__(self) -> Message:
        self._settle()
        while not self._buffer:
            self._buffer.extend(await self._poll())
            self._settle()
        self._last = self._buffer.popleft()
        return self._last

    async def getmany(self) -> list[Message]:
        """The next batch (what is left of one the iteration began, else a poll); what
        the previous calls returned counts as processed."""
        self._settle()
        if not self._buffer:
            self._buffer.extend(await self._poll())
        messages = list(self._buffer)
        self._buffer.clear()
        if messages:
            self._last = messages[-1]
        return messages

    async def _poll(self) -> list[Message]:
        await self.start()
        cursor = self._cursor
        delay = 0.01
        while True:
            fresh = await self._refresh_tx()
            due = cursor.due(time.monotonic())
            try:
                if due and cursor.unsure is not None:
                    await self._recover()
                    continue
                batch = await self.client.poll_subscription(
                    self.subscription,
                    start=cursor.done,
                    limit=self._batch,
                    transaction=self._tx,
                    wait_ms=self._wait_ms,
                    commit_version=cursor.version if due else None,
                    reread=self._tx is not None,
                    commit_later=due and self._commit_later,
                )
            except ServiceUnavailableError:
                cursor.unanswered(due)  # with a commit: it may have been written
                await asyncio.sleep(delay)
                delay = min(delay * 4, 10.0)
                continue
            except BadVersionError:
                await self._reload()
                continue
            cursor.answered(batch, due, time.monotonic())
            if batch.read_error is not None:  # the commit is done; the read failed for now
                await asyncio.sleep(delay)
                delay = min(delay * 4, 10.0)
                continue
            self._batch_end = batch.position
            if batch.fresh:  # read past what self._tx sees: read on, commit with a newer one
                self._tx_started = -float("inf")
            if batch.held:
                self._tx_started = -float("inf")  # read on with a newer transaction
                if not batch.messages and batch.held_finished:
                    continue  # what held it has finished: read on at once
                if fresh and not batch.messages:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            return batch.messages

    async def _refresh_tx(self) -> bool:
        if self.tx_client is None:
            return False
        if self._tx is not None and time.monotonic() - self._tx_started < self._tx_refresh_s:
            return False
        await self._end_tx()
        self._tx, self._tx_started = await self.tx_client.start_short(), time.monotonic()
        return True

    async def _end_tx(self) -> None:
        if self._tx is not None and self.tx_client is not None:
            with contextlib.suppress(TxError):
                await self.tx_client.abort(self._tx)  # it wrote nothing
        self._tx = None

    async def commit(self, *, through: Message | None = None) -> None:
        """Commit the position after the processed messages now; ``through``: count this
        message (and those before it) as processed too."""
        cursor = self._cursor
        self._settle()
        if through is not None:
            cursor.processed(after(through.id))
        if cursor.unsure is not None:
            await self._recover()
        if cursor.settled():  # (a commit answered before it was durable is written again)
            return
        await self._refresh_tx()  # a newer one when the last read went past what it sees
        try:
            info = await self.client.commit_subscription(
                self.subscription, cursor.done, cursor.version, transaction=self._tx
            )
        except BadVersionError:
            await self._reload()
            return
        cursor.commit_written(info, time.monotonic())

    async def stop(self) -> None:
        """Commit what was processed (not the message the iteration is on); end the
        read transaction; close the clients made here."""
        try:
            if self._started:
                self._last = self._batch_end = None  # the message it is on: not processed
                await self.commit()
        finally:
            await self._end_tx()
            await self.close_clients()

    async def __aenter__(self) -> Subscriber:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
