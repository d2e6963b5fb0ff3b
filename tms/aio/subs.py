"""The subscription calls of ``AsyncMessagingClient``: a subscription's poll and commits
over the binary protocol (ops 9-11, ``tms.client.rpcsubs``: the same requests, answers
and errors as ``MessagingClient``'s), its administration, ``seek`` and
``rollback_positions`` over REST (the blocking ``MessagingClient`` calls on a worker
thread). A part of ``tms.aio.client.AsyncMessagingClient``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TypeVar

from tms.client.http import MessagingClient
from tms.client.rpccore import Call
from tms.client.rpcsubs import commit_call, poll_call, position_call
from tms.client.subscriptions import SubscriptionBatch, SubscriptionInfo
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import Preferences, Start, SubscriptionId
from txn.transaction import Transaction

__all__ = ["AsyncCalls", "AsyncSubscriptionCalls"]

T = TypeVar("T")


class AsyncCalls:
    """What the parts of ``AsyncMessagingClient`` (``AsyncSubscriptionCalls``,
    ``tms.aio.queuecalls.AsyncQueueCalls``) call: its binary request and its REST
    client."""

    async def _run(self, call: Call[T]) -> T:
        raise NotImplementedError  # AsyncMessagingClient's

    async def _rest(self) -> MessagingClient:
        raise NotImplementedError  # AsyncMessagingClient's


class AsyncSubscriptionCalls(AsyncCalls):
    """See the module docstring."""

    # -- over the binary protocol ---------------------------------------------------------

    async def poll_subscription(
        self,
        sub: SubscriptionId,
        *,
        start: MessageId | None = None,
        limit: int | None = None,
        transaction: Transaction | None = None,
        wait_ms: int = 0,
        commit_version: int | None = None,
        reread: bool = False,
        commit_later: bool = False,
    ) -> SubscriptionBatch:
        """See ``MessagingClient.poll_subscription``."""
        return await self._run(
            poll_call(sub, start, limit, transaction, wait_ms, commit_version, reread, commit_later)
        )

    async def commit_subscription(
        self,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        *,
        transaction: Transaction | None = None,
    ) -> SubscriptionInfo:
        """See ``MessagingClient.commit_subscription``."""
        return await self._run(commit_call(sub, position, version, transaction))

    async def commit_in_transaction(
        self, sub: SubscriptionId, position: MessageId, version: int, transaction: Transaction
    ) -> None:
        """See ``MessagingClient.commit_in_transaction`` (``tms.aio.SubscriptionConsumer``
        uses it, and rolls it back)."""
        await self._run(position_call(sub, position, version, transaction))

    # -- over REST ------------------------------------------------------------------------

    async def create_subscription(
        self, sub: SubscriptionId, preferences: Preferences | None = None
    ) -> SubscriptionInfo:
        rest = await self._rest()
        return await asyncio.to_thread(rest.create_subscription, sub, preferences)

    async def get_subscription(self, sub: SubscriptionId) -> SubscriptionInfo:
        return await asyncio.to_thread((await self._rest()).get_subscription, sub)

    async def list_subscriptions(self, topic: TopicId) -> list[SubscriptionInfo]:
        return await asyncio.to_thread((await self._rest()).list_subscriptions, topic)

    async def update_subscription(
        self, sub: SubscriptionId, preferences: Preferences, version: int
    ) -> SubscriptionInfo:
        rest = await self._rest()
        return await asyncio.to_thread(rest.update_subscription, sub, preferences, version)

    async def delete_subscription(self, sub: SubscriptionId, version: int) -> None:
        await asyncio.to_thread((await self._rest()).delete_subscription, sub, version)

    async def seek_subscription(
        self,
        sub: SubscriptionId,
        to: Start,
        version: int,
        *,
        transaction: Transaction | None = None,
    ) -> SubscriptionInfo:
        rest = await self._rest()
        return await asyncio.to_thread(
            lambda: rest.seek_subscription(sub, to, version, transaction=transaction)
        )

    async def rollback_positions(self, sub: SubscriptionId, write_pointers: Iterable[int]) -> int:
        rest = await self._rest()
        return await asyncio.to_thread(rest.rollback_positions, sub, list(write_pointers))
