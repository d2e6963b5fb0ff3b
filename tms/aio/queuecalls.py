"""The queue calls of ``AsyncMessagingClient``: enqueue, receive (long-poll too), ack,
nack and settle over the binary protocol (ops 7, 8, 12-14, ``tms.rpc.queue_values``:
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
from tms.model import TopicId
from tms.queues import AckOutcome, Enqueued, EnqueueItem, QueueMessage, QueueStats, Receipt
from tms.rpc import queue_values as qv
from tms.rpc.frames import rpc
from tms.rpc.ops import BY_NAME

__all__ = ["AsyncQueueCalls"]

_RECEIVE, _ACK, _NACK = BY_NAME["receive"], BY_NAME["ack"], BY_NAME["nack"]
_ENQUEUE, _SETTLE = BY_NAME["enqueue"], BY_NAME["settle"]


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
        request = qv.enqueue_request(topic, items, tx_write_pointer)
        keyed = all(item.key is not None for item in items)
        return qv.enqueued_of(await self._call(_ENQUEUE, request, topic=topic, idempotent=keyed))

    async def receive_queue(
        self,
        topic: TopicId,
        max_messages: int = 1,
        *,
        lease_ms: int | None = None,
        wait_ms: int = 0,
    ) -> list[QueueMessage]:
        """Lease up to ``max_messages`` due messages, waiting up to ``wait_ms`` for one."""
        request = qv.receive_request(topic, max_messages, lease_ms, wait_ms)
        response = await self._call(_RECEIVE, request, topic=topic, wait_s=wait_ms / 1000)
        return qv.messages_of(response)

    async def ack_queue(
        self, topic: TopicId, receipts: Sequence[Receipt], *, tx_write_pointer: int | None = None
    ) -> list[AckOutcome]:
        request = qv.ack_request(topic, receipts, tx_write_pointer)
        return qv.outcomes_of(await self._call(_ACK, request, topic=topic))

    async def nack_queue(
        self, topic: TopicId, receipts: Sequence[Receipt], *, delay_ms: int | None = None
    ) -> list[AckOutcome]:
        request = qv.nack_request(topic, receipts, delay_ms)
        return qv.outcomes_of(await self._call(_NACK, request, topic=topic))

    async def settle_queue(self, topic: TopicId, tx_write_pointer: int, *, commit: bool) -> int:
        """A transaction's outcome for its pending work in a queue; how many it settled."""
        request = rpc.SettleRequest(
            ns=topic.namespace, topic=topic.topic, write_pointer=tx_write_pointer, commit=commit
        )
        return int((await self._call(_SETTLE, request, topic=topic)).settled or 0)

    async def queue_stats(self, topic: TopicId) -> QueueStats:
        rest = await self._rest()
        return await asyncio.to_thread(lambda: rest.queue(topic).stats())
