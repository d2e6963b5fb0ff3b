"""Queues from asyncio code (docs/queues.md): ``Queue`` for one queue, ``Worker`` to run a
coroutine per message.

::

    async with Producer(URL, tx_server=TX) as producer:
        jobs = Queue(producer, TopicId("default", "jobs"))
        await jobs.enqueue([b"resize photo-1.jpg"])
        for message in await jobs.receive(10, wait_s=5):
            async with producer.transaction():
                await producer.publish(done, message.payload)
                await jobs.ack([message])               # acked at commit, with the publish

``Queue(client_or_producer, topic)``: its calls are the binary requests of
``tms.aio.queuecalls``. Made with a ``Producer``, ``enqueue`` and ``ack`` inside that
producer's ``transaction()`` (the current task's) carry its write pointer, and the queue
is a party to it (``tms.aio.producer.Participant``), as ``tms.client.queue.
TransactionalQueue`` is to a ``TransactionContext``: enqueued messages are pending
(never delivered) until the transaction commits, and acks take effect at the commit;
after the commit the queue settles them at once (``settle``; if that fails the service
settles them itself once it sees the commit). If the transaction does not commit they
are settled the other way before it is aborted — messages gone, acked messages leased
again until their lease runs out — and when a write's outcome is unknown or that settle
fails, the producer *invalidates* the transaction instead, and the service drops its
pending work. ``receive`` and ``nack`` never join a transaction (a lease is not
transactional: docs/queues.md).

``Worker(queue, handler, concurrency=)``: receives (long-polling up to ``wait_s``) only
as many messages as it has room to run, runs ``await handler(message)`` for each, at
most ``concurrency`` at once, acks a message whose handler returned and nacks one whose
handler raised (the queue's back-off, or ``retry_delay_s``, then decides when it comes
back; after ``max_attempts`` it is dead-lettered). ``stop()`` ends it cleanly: no new
receive; messages that a receive in flight still brings are nacked with no delay (so
another worker gets them at once rather than after their lease); the handlers running
finish and are acked or nacked; then ``run()`` returns. Cancelling ``run()`` cancels the
handlers: their messages come back when their leases run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import TypeVar

from tms.aio.client import AsyncMessagingClient
from tms.aio.producer import Producer
from tms.client.queuecore import (
    Deliveries,
    TxQueueWork,
    delay_ms_of,
    items_of,
    lease_ms_of,
    receipts_of,
    wait_ms_of,
)
from tms.errors import TmsError, TmsInvalidArgumentError
from tms.model import TopicId
from tms.queues import AckOutcome, Enqueued, EnqueueItem, QueueMessage, QueueStats
from txn.transaction import Transaction

__all__ = ["Queue", "Worker"]

log = logging.getLogger(__name__)
R = TypeVar("R")


class _Party:
    """A queue's part in one transaction: the write pointers it enqueued or acked under."""

    def __init__(self, queue: Queue, tx: Transaction) -> None:
        self._queue = queue
        self._tx = tx
        self.work = TxQueueWork()

    def changes(self) -> Collection[bytes]:
        return ()  # leases, not conflicts, keep two workers apart

    async def before_commit(self, tx: Transaction) -> None:
        pass  # written at once, pending under the write pointer

    async def after_commit(self, tx: Transaction) -> None:
        await self._settle(commit=True)

    async def rollback(self, tx: Transaction) -> bool:
        settled_all = True
        try:
            await self._settle(commit=False)
        except TmsError:
            log.warning("could not settle %s of an aborted transaction", self._queue.topic)
            settled_all = False
        return self.work.rollback_proven(settled_all)

    async def _settle(self, *, commit: bool) -> None:
        for topic, wp in self.work.to_settle():
            await self._queue.client.settle_queue(topic, wp, commit=commit)

    def finished(self) -> None:
        self._queue._parties.pop(self._tx.transaction_id, None)


class Queue:
    """See the module docstring. Use from one event loop."""

    def __init__(self, via: AsyncMessagingClient | Producer, topic: TopicId) -> None:
        self.producer = via if isinstance(via, Producer) else None
        self.client: AsyncMessagingClient = via.client if isinstance(via, Producer) else via
        self.topic = topic
        self._parties: dict[int, _Party] = {}

    def _party(self) -> _Party | None:
        """The current task's transaction's party (enlisted), or None outside one."""
        tx = self.producer.transaction_in_progress if self.producer is not None else None
        if tx is None:
            return None
        party = self._parties.get(tx.transaction_id)
        if party is None:
            party = self._parties[tx.transaction_id] = _Party(self, tx)
        assert self.producer is not None
        self.producer.enlist(party)
        party.work.joined(self.topic, tx.write_pointer)
        return party

    @staticmethod
    async def _joined(party: _Party | None, call: Awaitable[R]) -> R:
        try:
            return await call
        except BaseException as exc:
            if party is not None:
                party.work.failed(exc)
            raise

    async def enqueue(self, messages: Iterable[EnqueueItem | bytes | str]) -> list[Enqueued]:
        """Enqueue (``EnqueueItem`` for a key, a schedule or a priority): deliverable
        now, or when the current transaction commits."""
        party = self._party()
        wp = party._tx.write_pointer if party is not None else None
        call = self.client.enqueue_queue(self.topic, items_of(messages), tx_write_pointer=wp)
        return await self._joined(party, call)

    async def receive(
        self, max_messages: int = 1, *, lease_s: float | None = None, wait_s: float = 0
    ) -> list[QueueMessage]:
        """Lease up to ``max_messages`` due messages (for ``lease_s``, else the queue's),
        waiting up to ``wait_s`` for one."""
        return await self.client.receive_queue(
            self.topic, max_messages, lease_ms=lease_ms_of(lease_s), wait_ms=wait_ms_of(wait_s)
        )

    async def ack(self, deliveries: Deliveries) -> list[AckOutcome]:
        """Finish deliveries: now, or when the current transaction commits."""
        party = self._party()
        wp = party._tx.write_pointer if party is not None else None
        call = self.client.ack_queue(self.topic, receipts_of(deliveries), tx_write_pointer=wp)
        return await self._joined(party, call)

    async def nack(
        self, deliveries: Deliveries, *, delay_s: float | None = None
    ) -> list[AckOutcome]:
        """Return deliveries, due again after ``delay_s`` (None: the queue's back-off)."""
        receipts = receipts_of(deliveries)
        return await self.client.nack_queue(self.topic, receipts, delay_ms=delay_ms_of(delay_s))

    async def stats(self) -> QueueStats:
        return await self.client.queue_stats(self.topic)


Handler = Callable[[QueueMessage], Awaitable[object]]


class Worker:
    """See the module docstring."""

    def __init__(
        self,
        queue: Queue,
        handler: Handler,
        *,
        concurrency: int = 8,
        batch: int = 10,
        lease_s: float | None = None,
        wait_s: float = 5.0,
        retry_delay_s: float | None = None,
    ) -> None:
        if concurrency < 1 or batch < 1:
            raise TmsInvalidArgumentError("concurrency and batch are at least 1")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch = batch
        self.lease_s = lease_s
        self.wait_s = wait_s
        self.retry_delay_s = retry_delay_s
        self.processed = 0
        """Messages whose handler returned (and that were acked)."""
        self.failed = 0
        """Messages whose handler raised (and that were nacked)."""
        self._stopping = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._room = asyncio.Condition()

    def stop(self) -> None:
        """End ``run`` cleanly (see the module docstring)."""
        self._stopping.set()

    async def run(self, *, until_empty: bool = False) -> None:
        """Work until ``stop()`` (or, with ``until_empty``, until a receive finds nothing
        and no handler is running)."""
        try:
            while not self._stopping.is_set():
                free = await self._free()
                if self._stopping.is_set():
                    break
                wait_s = 0.0 if until_empty else self.wait_s
                messages = await self._receive(min(self.batch, free), wait_s)
                if self._stopping.is_set() and messages:
                    await self._give_back(messages)
                    break
                for message in messages:
                    task = asyncio.get_running_loop().create_task(self._handle(message))
                    self._running.add(task)
                if until_empty and not messages and not self._running:
                    break
                if until_empty and not messages:
                    await self._free(all_of_them=True)
            if self._running:
                await asyncio.gather(*self._running, return_exceptions=True)
        except asyncio.CancelledError:
            for task in self._running:
                task.cancel()
            raise

    async def _free(self, *, all_of_them: bool = False) -> int:
        """Wait for room for one more handler (or for all to be done); how much room."""
        need = self.concurrency if all_of_them else 1
        async with self._room:
            await self._room.wait_for(lambda: self.concurrency - len(self._running) >= need)
            return self.concurrency - len(self._running)

    async def _receive(self, n: int, wait_s: float) -> list[QueueMessage]:
        receive = asyncio.ensure_future(self.queue.receive(n, lease_s=self.lease_s, wait_s=wait_s))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            # A stop does not cancel the receive: what it leased is given back instead.
            await asyncio.wait({receive, stopping}, return_when=asyncio.FIRST_COMPLETED)
            try:
                return await receive
            except TmsError:
                log.warning("receive from %s failed", self.queue.topic, exc_info=True)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), 1.0)  # then try again
                return []
        finally:
            stopping.cancel()

    async def _give_back(self, messages: list[QueueMessage]) -> None:
        try:
            await self.queue.nack(messages, delay_s=0)
        except TmsError:
            log.warning("could not give back %d messages; their leases will run out", len(messages))

    async def _handle(self, message: QueueMessage) -> None:
        try:
            try:
                await self.handler(message)
            except Exception:
                log.exception(
                    "handler failed on %s (attempt %d)", message.id.hex(), message.attempt
                )
                self.failed += 1
                await self.queue.nack([message], delay_s=self.retry_delay_s)
            else:
                await self.queue.ack([message])
                self.processed += 1
        except TmsError:
            log.warning(
                "could not finish %s; its lease will run out", message.id.hex(), exc_info=True
            )
        finally:
            self._running.discard(asyncio.current_task())
            async with self._room:
                self._room.notify_all()
