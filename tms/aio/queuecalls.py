"""The queue calls of ``AsyncMessagingClient``: enqueue, receive (long-poll too), ack,
nack and settle over the binary protocol (ops 7, 8, 12-14, ``tms.client.rpccore``:
the same requests, answers and errors as ``tms.client.rpc.RpcMessagingClient``'s), a
queue's stats over REST (the blocking ``MessagingClient`` call on a worker thread). A
part of ``tms.aio.client.AsyncMessagingClient``; ``tms.aio.queue.Queue`` is the shape
to use them in.

What is sent again after a lost answer: receive (its leases run out), ack and settle
(a repeat answers the same), and an enqueue whose every message has a key (a repeat is
a duplicate); a keyless enqueue and a nack are not (``ServiceUnavailableError`` says the
outcome is unknown).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tms.aio.subs import AsyncCalls
from tms.client import rpccore as core
from tms.model import TopicId
from tms.queues import AckOutcome, Enqueued, EnqueueItem, QueueMessage, QueueStats, Receipt

__all__ = ["AsyncQueueCalls"]


class AsyncQueueCalls(AsyncCalls):
    """See the module docstring."""

    async def enqueue_queue(
        self,
        topic: TopicId,
        items: Sequence[EnqueueItem],
        *,
        tx_write_pointer: int | None = None,
    ) -> list[Enqueued]:
        """Enqueue (pending until that transaction commits, with a write pointer)."""
        return await self._run(core.enqueue(topic, items, tx_write_pointer))

    async def receive_queue(
        self,
        topic: TopicId,
        max_messages: int = 1,
        *,
        lease_ms: int | None = None,
        wait_ms: int = 0,
    ) -> list[QueueMessage]:
        """Lease up to ``max_messages`` due messages, waiting up to ``wait_ms`` for one."""
        return await self._run(core.receive(topic, max_messages, lease_ms, wait_ms))

    async def ack_queue(
        self, topic: TopicId, receipts: Sequence[Receipt], *, tx_write_pointer: int | None = None
    ) -> list[AckOutcome]:
        return await self._run(core.ack(topic, receipts, tx_write_pointer))

    async def nack_queue(
        self, topic: TopicId, receipts: Sequence[Receipt], *, delay_ms: int | None = None
    ) -> list[AckOutcome]:
        return await self._run(core.nack(topic, receipts, delay_ms))

    async def settle_queue(self, topic: TopicId, tx_write_pointer: int, *, commit: bool) -> int:
        """A transaction's outcome for its pending work in a queue; how many it settled."""
        return await self._run(core.settle(topic, tx_write_pointer, commit))

    async def queue_stats(self, topic: TopicId) -> QueueStats:
        rest = await self._rest()
        return await asyncio.to_thread(lambda: rest.queue(topic).stats())
