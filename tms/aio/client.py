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
from itertools import islice
from typing import Any

from tms.aio.channel import AsyncChannel, AsyncChannelPool
from tms.aio.queuecalls import AsyncQueueCalls
from tms.aio.subs import AsyncSubscriptionCalls
from tms.client.channel import (
    RETRY,
    ChannelError,
    answer_of,
    check_retry,
    error_of,
    may_retry,
    unavailable,
)
from tms.client.http import MarkersOutcome, MessagingClient, PollResult, RollbackToken
from tms.client.owners import OwnerRoutes
from tms.client.rpc import client_ssl_context, rest_url
from tms.errors import ServiceUnavailableError, TmsError
from tms.ids import MessageId
from tms.model import TopicBounds, TopicId
from tms.rpc.endpoints import Endpoints, parse_url
from tms.rpc.frames import (
    FLAG_ERROR,
    Frame,
    decode_body,
    encode_body,
    plain_names,
    plain_publish_body,
    rpc,
)
from tms.rpc.ops import BY_NAME, Op
from tms.rpc.values import (
    bounds_of,
    messages_of,
    payloads_of,
    poll_request,
    publish_request,
    rollback_range,
    token_of,
)
from txms_common.retry import backoff
from txn.transaction import Transaction

__all__ = ["AsyncMessagingClient"]

_PUBLISH, _STORE, _ROLLBACK = BY_NAME["publish"], BY_NAME["store"], BY_NAME["rollback"]
_MARKERS, _POLL, _BOUNDS = BY_NAME["markers"], BY_NAME["poll"], BY_NAME["bounds"]
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
        self._plain_names: dict[TopicId, bytes] = {}  # publish_nowait's bodies begin so

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

    async def _call(
        self,
        op: Op,
        request: Any,
        *,
        topic: object = None,
        idempotent: bool | None = None,
        wait_s: float = 0.0,
    ) -> Any:
        """Send ``request`` as ``op``; the response struct (``tms.client.rpc`` retries)."""
        body = encode_body(request)
        retry_lost = op.idempotent if idempotent is None else idempotent
        queue_ms = max(1, int(self._timeout * 500))
        delays = islice(backoff(self._backoff, 4.0), self._retries)
        hops = 0
        while True:
            pool = self._routes.pool(topic)
            channel = None
            try:
                channel = await pool.acquire()
                frame = await channel.request(
                    op.code, body, timeout_s=self._timeout + wait_s, queue_timeout_ms=queue_ms
                )
            except (ChannelError, ServiceUnavailableError) as exc:
                if channel is not None and channel.dead:
                    pool.discard(channel)
                    pool.endpoints.failed(channel.address)
                self._routes.lost(topic, pool)
                delay = next(delays, None)
                check_retry(op, exc, retry_lost=retry_lost, again=delay is not None)
            else:
                if frame.flags & FLAG_ERROR:  # not_owner: to the owner (tms.client.owners)
                    pause = self._routes.redirect(topic, error_of(frame, topic), hops)
                    if pause is not None:
                        hops += 1
                        if pause:
                            await asyncio.sleep(pause)
                        continue
                delay = next(delays, None)
                answer = answer_of(
                    op, frame, topic=topic, retry_lost=retry_lost, again=delay is not None
                )
                if answer is not RETRY:
                    return answer
            assert delay is not None
            await asyncio.sleep(delay)

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
        data = payloads_of(payloads)
        marker = tx_write_pointer is not None and not data
        request = publish_request(topic, data, tx_write_pointer, ttls)
        response = await self._call(_PUBLISH, request, topic=topic, idempotent=marker)
        if response.rollback is None:
            return None
        return RollbackToken(*token_of(response.rollback))

    async def store(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int,
        ttls: Iterable[int | None] | None = None,
    ) -> None:
        request = publish_request(topic, payloads_of(payloads), tx_write_pointer, ttls)
        await self._call(_STORE, request, topic=topic)

    async def rollback(self, topic: TopicId, token: RollbackToken) -> None:
        request = rpc.RollbackRequest(
            ns=topic.namespace, topic=topic.topic, rollback=rollback_range(token.detail)
        )
        await self._call(_ROLLBACK, request, topic=topic)

    async def publish_markers(
        self, topic: TopicId, write_pointers: Iterable[int], *, idempotency_key: str | None = None
    ) -> MarkersOutcome:
        request = rpc.MarkersRequest(
            ns=topic.namespace,
            topic=topic.topic,
            write_pointers=list(write_pointers),
            idempotency_key=idempotency_key,
        )
        response = await self._call(_MARKERS, request, topic=topic)
        tokens = [RollbackToken(*token_of(m)) for m in response.markers or ()]
        return MarkersOutcome(tokens, bool(response.duplicate))

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
            if tx_write_pointer is None and data:  # built from its bytes: no struct
                body = plain_publish_body(self._names(topic), data)
            else:
                body = encode_body(publish_request(topic, data, tx_write_pointer, None))
            with contextlib.suppress(ChannelError):
                sent = channel.request(
                    _PUBLISH.code,
                    body,
                    timeout_s=self._timeout,
                    queue_timeout_ms=max(1, int(self._timeout * 500)),
                )
                sent.add_done_callback(
                    partial(self._published, result, topic, data, tx_write_pointer)
                )
                return result
        self._publish_later(result, topic, data, tx_write_pointer)
        return result

    def _names(self, topic: TopicId) -> bytes:
        names = self._plain_names.get(topic)
        if names is None:
            names = plain_names(topic.namespace, topic.topic)
            if len(self._plain_names) < 1024:
                self._plain_names[topic] = names
        return names

    def _published(
        self,
        result: asyncio.Future[RollbackToken | None],
        topic: TopicId,
        data: list[bytes],
        tx_write_pointer: int | None,
        sent: asyncio.Future[Frame],
    ) -> None:
        if result.done():
            return
        error = sent.exception()
        if error is None:
            frame = sent.result()
            if frame.body == _NO_ROLLBACK and not frame.flags & FLAG_ERROR:  # most answers
                result.set_result(None)
                return
            if not frame.flags & FLAG_ERROR:
                response = decode_body(_PUBLISH.response, frame.body)
                token = None if response.rollback is None else token_of(response.rollback)
                result.set_result(None if token is None else RollbackToken(*token))
                return
            error = error_of(frame, topic)
        marker = tx_write_pointer is not None and not data
        if self._routes.redirect(topic, error, 0) is not None or (
            isinstance(error, ChannelError | TmsError) and may_retry(error, marker)
        ):  # publish sends it on
            self._publish_later(result, topic, data, tx_write_pointer)
        elif isinstance(error, ChannelError):
            result.set_exception(unavailable(_PUBLISH.name, error))
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
        request = poll_request(topic, start, inclusive, None, transaction)
        return bounds_of(await self._call(_BOUNDS, request, topic=topic))

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
        request = poll_request(topic, start, inclusive, limit, transaction, wait_ms)
        response = await self._call(_POLL, request, topic=topic, wait_s=wait_ms / 1000)
        return PollResult(messages_of(response), bool(response.held))

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
