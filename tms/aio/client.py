"""``AsyncMessagingClient``: ``MessagingClient``'s methods as coroutines, over the binary
protocol (``tms://host:port``, ``tmss://`` for TLS).

Any number of tasks may call at once: their requests share the client's connections
(``connections``, default 1) and are answered in any order. Retries, timeouts and
shielding are those of ``tms.client.rpc`` (same rules, same errors). Topic
administration stays on the REST API: ``create_topic`` and its kind run the blocking
``MessagingClient`` calls on a worker thread, at the address the server names in its
hello answer (or ``http_url``). A subscription's poll and commits travel as binary
requests, its administration goes to REST (``tms.aio.subs``). In a cluster a topic's
requests follow its owner as ``tms.client.rpc``'s do (``tms.client.owners``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable, Mapping
from functools import partial
from typing import TypeVar, cast

from tms.aio.channel import AsyncChannel, AsyncChannelPool
from tms.aio.queuecalls import AsyncQueueCalls
from tms.aio.subs import AsyncSubscriptionCalls
from tms.client import rpccore as core
from tms.client.channel import ChannelError, error_of, may_retry, unavailable
from tms.client.http import MarkersOutcome, MessagingClient, PollResult, RollbackToken
from tms.client.owners import OwnerRoutes
from tms.client.rpc import client_ssl_context, rest_url
from tms.client.rpccore import AGAIN, Attempts, Call, Pause
from tms.errors import ServiceUnavailableError, TmsError
from tms.ids import MessageId
from tms.model import TopicBounds, TopicId
from tms.rpc.endpoints import Endpoints, parse_url
from tms.rpc.frames import FLAG_ERROR, Frame, decode_body, encode_body, rpc
from tms.rpc.values import payloads_of
from txn.transaction import Transaction

__all__ = ["AsyncMessagingClient"]

T = TypeVar("T")
_NO_ROLLBACK = encode_body(rpc.PublishResponse())  # a publish that was not transactional


class AsyncMessagingClient(AsyncSubscriptionCalls, AsyncQueueCalls):
    """See the module docstring. Use from one event loop."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        ca_bundle: str | os.PathLike[str] | None = None,
        connections: int = 1,
        http_url: str | None = None,
        client_id: str | None = None,
        shield_after: int = 3,
        shield_s: float = 1.0,
    ) -> None:
        addresses, tls = parse_url(url)
        self.url = url
        self._token = token
        self._timeout = timeout_s
        self._retries = retries
        self._backoff = backoff_s
        self._ca_bundle = ca_bundle
        self._client_id = client_id or f"{os.getpid()}@txms-aio"
        self._ssl = client_ssl_context(ca_bundle) if tls else None
        self.endpoints = Endpoints(addresses, shield_after=shield_after, shield_s=shield_s)
        self._pool = AsyncChannelPool(self.endpoints, self._connect, connections)
        self._routes: OwnerRoutes[AsyncChannelPool] = OwnerRoutes(
            self._pool,
            lambda endpoints: AsyncChannelPool(endpoints, self._connect, connections),
            lambda address: Endpoints([address], shield_after=shield_after, shield_s=shield_s),
        )
        self._http_url = http_url
        self._admin: MessagingClient | None = None

    async def _connect(self, address: tuple[str, int]) -> AsyncChannel:
        return await AsyncChannel.open(
            address,
            token=self._token,
            client_id=self._client_id,
            timeout_s=min(self._timeout, 10.0),
            ssl_context=self._ssl,
        )

    async def close(self) -> None:
        self._routes.close()
        self._pool.close()
        if self._admin is not None:
            await asyncio.to_thread(self._admin.close)

    async def __aenter__(self) -> AsyncMessagingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        """A round trip to the service (``ServiceUnavailableError`` without one)."""
        try:
            channel = await self._pool.acquire()
            await channel.ping(self._timeout)
        except ChannelError as exc:
            raise ServiceUnavailableError(f"ping: {exc}") from exc

    async def _run(self, call: Call[T]) -> T:
        """Send ``call`` until ``Attempts`` gives its answer (``tms.client.rpc``'s rules)."""
        attempts = Attempts(
            call,
            self._routes,
            timeout_s=self._timeout,
            retries=self._retries,
            backoff_s=self._backoff,
        )
        code, body = call.op.code, call.body
        while True:
            pool = attempts.pool()
            channel = None
            try:
                channel = await pool.acquire()
                frame = await channel.request(
                    code, body, timeout_s=attempts.timeout_s, queue_timeout_ms=attempts.queue_ms
                )
            except (ChannelError, ServiceUnavailableError) as exc:
                if channel is not None and channel.dead:
                    pool.discard(channel)
                step = attempts.failed(pool, channel, exc)
            else:
                step = attempts.answered(frame)
                if step is AGAIN:
                    continue
                if not isinstance(step, Pause):
                    return cast(T, step)
            await asyncio.sleep(step.seconds)

    # -- writing --------------------------------------------------------------------------

    async def publish(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int | None = None,
        ttls: Iterable[int | None] | None = None,
    ) -> RollbackToken | None:
        """See ``MessagingClient.publish``: durable when it returns."""
        return await self._run(core.publish(topic, payloads, tx_write_pointer, ttls))

    async def store(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int,
        ttls: Iterable[int | None] | None = None,
    ) -> None:
        await self._run(core.store(topic, payloads, tx_write_pointer, ttls))

    async def rollback(self, topic: TopicId, token: RollbackToken) -> None:
        await self._run(core.rollback(topic, token))

    async def publish_markers(
        self, topic: TopicId, write_pointers: Iterable[int], *, idempotency_key: str | None = None
    ) -> MarkersOutcome:
        return await self._run(core.markers(topic, write_pointers, idempotency_key))

    def publish_nowait(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int | None = None,
    ) -> asyncio.Future[RollbackToken | None]:
        """``publish`` without waiting: the request leaves at once when a connection is
        open (no task per call: what a producer publishing many small messages needs), and
        the future gets what ``publish`` would return or raise. One that must be sent
        again, or that finds no open connection, goes through ``publish``."""
        data = payloads_of(payloads)
        result: asyncio.Future[RollbackToken | None] = asyncio.get_running_loop().create_future()
        channel = self._routes.pool(topic).ready()
        if channel is not None:
            body = core.publish_body(topic, data, tx_write_pointer, None)
            with contextlib.suppress(ChannelError):
                channel.request_then(
                    core.PUBLISH.code,
                    body,
                    partial(self._published, result, topic, data, tx_write_pointer),
                    timeout_s=self._timeout,
                    queue_timeout_ms=max(1, int(self._timeout * 500)),
                )
                return result
        self._publish_later(result, topic, data, tx_write_pointer)
        return result

    def _published(
        self,
        result: asyncio.Future[RollbackToken | None],
        topic: TopicId,
        data: list[bytes],
        tx_write_pointer: int | None,
        answer: Frame | ChannelError,
    ) -> None:
        if result.done():
            return
        # called by the channel as the answer is read: it must not raise
        error: BaseException
        if isinstance(answer, ChannelError):
            error = answer
        elif answer.flags & FLAG_ERROR:
            error = error_of(answer, topic)
        elif answer.body == _NO_ROLLBACK:  # most answers
            result.set_result(None)
            return
        else:
            try:
                result.set_result(
                    core.rollback_token(decode_body(core.PUBLISH.response, answer.body))
                )
            except TmsError as exc:  # a response that does not decode
                result.set_exception(exc)
            return
        marker = tx_write_pointer is not None and not data
        if self._routes.redirect(topic, error, 0) is not None or (
            isinstance(error, ChannelError | TmsError) and may_retry(error, marker)
        ):  # publish sends it on
            self._publish_later(result, topic, data, tx_write_pointer)
        elif isinstance(error, ChannelError):
            result.set_exception(unavailable(core.PUBLISH.name, error))
        else:
            result.set_exception(error)

    def _publish_later(
        self,
        result: asyncio.Future[RollbackToken | None],
        topic: TopicId,
        data: list[bytes],
        tx_write_pointer: int | None,
    ) -> None:
        task = asyncio.ensure_future(self.publish(topic, data, tx_write_pointer=tx_write_pointer))

        def copy(done: asyncio.Future[RollbackToken | None]) -> None:
            if result.done():
                return
            if done.cancelled():
                result.cancel()
            elif (error := done.exception()) is not None:
                result.set_exception(error)
            else:
                result.set_result(done.result())

        task.add_done_callback(copy)

    # -- reading --------------------------------------------------------------------------

    async def bounds(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        transaction: Transaction | None = None,
    ) -> TopicBounds:
        return await self._run(core.bounds(topic, start, inclusive, transaction))

    async def poll(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        limit: int | None = None,
        transaction: Transaction | None = None,
        wait_ms: int = 0,
    ) -> PollResult:
        return await self._run(core.poll(topic, start, inclusive, limit, transaction, wait_ms))

    # -- administration (REST) ------------------------------------------------------------

    async def _rest(self) -> MessagingClient:
        if self._admin is None:
            url = self._http_url
            if url is None:
                channel = await self._pool.acquire()
                url = rest_url(self.url, channel.address, channel.welcome)
            self._admin = MessagingClient(
                url, token=self._token, timeout_s=self._timeout, ca_bundle=self._ca_bundle
            )
        return self._admin

    async def create_topic(
        self, topic: TopicId, properties: Mapping[str, str] | None = None
    ) -> None:
        await asyncio.to_thread((await self._rest()).create_topic, topic, properties)

    async def update_topic(self, topic: TopicId, properties: Mapping[str, str]) -> None:
        await asyncio.to_thread((await self._rest()).update_topic, topic, properties)

    async def get_topic(self, topic: TopicId) -> dict[str, str]:
        return await asyncio.to_thread((await self._rest()).get_topic, topic)

    async def list_topics(self, namespace: str) -> list[str]:
        return await asyncio.to_thread((await self._rest()).list_topics, namespace)

    async def delete_topic(self, topic: TopicId) -> None:
        await asyncio.to_thread((await self._rest()).delete_topic, topic)
