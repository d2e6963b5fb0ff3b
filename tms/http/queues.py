"""The queue routes of the REST service (``tms.queues``), JSON bodies only
(``tms.codec.queue_json``): enqueue, receive (long-poll), ack, nack, settle, stats.

A receive is a write (the lease is made durable before the messages are answered),
submitted from the loop to the queue's group commit like a publish. ``?wait_ms=N``
makes a receive that leased nothing wait up to N ms (``tms.http.waiting.receive_waiting``):
it is woken when the queue gets a ready message (an enqueue, a commit, a nack) and
retries when the next scheduled message or lease expiry the queue knows of comes due,
whichever is first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tms.codec import queue_json as qj
from tms.errors import TmsInvalidArgumentError
from tms.http.config import HttpConfig
from tms.http.waiting import receive_waiting
from tms.model import TopicId
from tms.operations import Ack, Enqueue, Nack, Settle
from tms.service import MessagingService

__all__ = ["QueueHandlers"]

JSON = "application/json"


class QueueHandlers:
    """The queue handlers of ``tms.http.app.Api`` (a base class of it)."""

    svc: MessagingService
    config: HttpConfig
    waiters: Any
    _topic: Callable[[web.Request], TopicId]
    _body: Callable[[web.Request], Awaitable[bytes]]
    _run: Callable[..., Awaitable[Any]]
    _wait_ms: Callable[[web.Request], int]

    async def _json_body(self, request: web.Request) -> bytes:
        if request.content_type != JSON:
            raise TmsInvalidArgumentError(f"queue routes take {JSON} bodies")
        return await self._body(request)

    @staticmethod
    def _reply(body: bytes) -> web.Response:
        return web.Response(body=body, content_type=JSON)

    async def enqueue(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        enqueue = qj.decode_enqueue_request(topic, await self._json_body(request))
        results = await self.svc.submit_async(Enqueue(enqueue))
        return self._reply(qj.encode_enqueue_response(results))

    async def receive(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        receive = qj.decode_receive_request(topic, await self._json_body(request))
        wait_ms = self._wait_ms(request)
        result = await receive_waiting(self.svc, self.waiters, receive, wait_ms)
        return self._reply(qj.encode_receive_response(result))

    async def ack(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        ack = qj.decode_ack_request(topic, await self._json_body(request))
        return self._reply(qj.encode_outcomes(await self.svc.submit_async(Ack(ack))))

    async def nack(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        nack = qj.decode_nack_request(topic, await self._json_body(request))
        return self._reply(qj.encode_outcomes(await self.svc.submit_async(Nack(nack))))

    async def settle(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        settle = qj.decode_settle_request(topic, await self._json_body(request))
        count = await self.svc.submit_async(Settle(settle))
        return self._reply(b'{"settled":%d}' % count)

    async def queue_stats(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        stats = await self._run(self.svc.queue_stats, topic)
        return self._reply(qj.encode_queue_stats(stats))
