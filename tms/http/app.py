"""The REST service (aiohttp): the design's routes under ``/v1/namespaces/{namespace}``.

Bodies are ``avro/binary`` (the v1 schemas, byte-compatible with CDAP's client) or
``application/json`` (``tms.codec.json``). Every error is ``{"error": CODE, "message":
TEXT}`` with the status of its ``TmsError`` class, and nothing is stored on any error.

The event loop never blocks on storage: reads and topic calls run on a worker thread
pool, and writes are submitted from the loop to the topic's group commit
(``MessagingService.submit_async``): the requests that arrive while a topic's batch is
being written go out as its next one, with one thread hand-off per batch.
A poll streams its messages in chunks (one Avro array block, or a slice of the JSON
array, per chunk). ``?wait_ms=N`` makes a poll that finds nothing wait up to N ms for
the topic to change; it answers as soon as there is something. A transactional poll
that stopped at an uncommitted entry answers with ``X-Tms-Held: true`` (when the answer
fits in one chunk; JSON also says ``"held": true``): the caller needs a newer transaction
to get past it. With nothing before that entry and ``wait_ms``, it first waits for that
transaction to finish and then also says ``X-Tms-Held-Finished: true``
(``tms.http.waiting``). Subscriptions' routes are in ``tms.http.subscriptions``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeVar

from aiohttp import web

from tms.codec import avro
from tms.codec import json as jsonc
from tms.errors import (
    NotOwnerError,
    RequestTooLargeError,
    TmsError,
    TmsInvalidArgumentError,
)
from tms.fetcher import FetchRequest, MessageFetcher, fetch_request_of
from tms.history import MetricsHistory
from tms.http.auth import Authorizer
from tms.http.config import HttpConfig
from tms.http.console import ConsoleApi
from tms.http.observe import ObserveApi, sample_forever
from tms.http.openapi import openapi_spec
from tms.http.protocol import code_for_status, error_response
from tms.http.queues import QueueHandlers
from tms.http.routes import ROUTES, Route, authorize
from tms.http.subscriptions import SubscriptionApi
from tms.http.waiting import LongPoll, TopicWaiters
from tms.model import MarkersRequest, Message, StoreRequest, TopicId, validate_namespace
from tms.operations import Markers, Publish, Rollback, Store
from tms.service import MessagingService
from tms.txwatch import TxWatch

__all__ = ["API", "AVRO", "JSON", "HttpConfig", "create_app"]

log = logging.getLogger(__name__)

AVRO = "avro/binary"
JSON = "application/json"
T = TypeVar("T")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _route_of(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@dataclass(slots=True)
class _Read:
    """A poll's read in progress: the first chunk, and the iterator for the rest."""

    topic: TopicId
    fetcher: MessageFetcher
    messages: Any
    first: list[Message]
    exhausted: bool
    finished: bool = False
    """The transaction the read is held behind has finished (read on with a new one)."""


class Api(ObserveApi, ConsoleApi, SubscriptionApi, QueueHandlers):
    def __init__(
        self,
        service: MessagingService,
        config: HttpConfig,
        authorizer: Authorizer | None,
        pool: ThreadPoolExecutor,
        tx_watch: TxWatch | None = None,
    ) -> None:
        self.svc = service
        self.config = config
        self.auth = authorizer
        self.pool = pool
        self.tx_watch = tx_watch
        self.history = MetricsHistory(service.metrics, interval_s=config.history_interval_s)
        self.features = {
            "stats": True,
            "metricsHistory": config.history_interval_s > 0,
            "transactions": tx_watch is not None,
            "subscriptions": True,
            "cluster": service.ownership is not None,
            "queues": True,
        }
        """What the console may show (``GET /v1/console``): a panel whose feature is
        missing or False is not shown. Later features add their key here."""
        self.waiters: TopicWaiters | None = None
        self.long_poll: LongPoll | None = None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    # Access was checked before the handler ran (``tms.http.routes``).

    @staticmethod
    def _namespace(request: web.Request) -> str:
        return validate_namespace(request.match_info["namespace"])

    @staticmethod
    def _topic(request: web.Request) -> TopicId:
        return TopicId(request.match_info["namespace"], request.match_info["topic"])

    @staticmethod
    def _format(request: web.Request) -> str:
        content_type = request.content_type
        if content_type not in (AVRO, JSON):
            raise TmsInvalidArgumentError(
                f"Only {AVRO} and {JSON} content types are supported, not {content_type!r}."
            )
        return content_type

    async def _body(self, request: web.Request) -> bytes:
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise RequestTooLargeError(
                f"the request body is larger than {self.config.max_request_bytes} bytes"
            ) from exc

    # -- topics -------------------------------------------------------------------------

    async def create_topic(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        properties = jsonc.decode_topic_properties(await self._body(request))
        await self._run(self.svc.create_topic, topic, properties)
        return web.Response(status=200)

    async def update_topic(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        properties = jsonc.decode_topic_properties(await self._body(request))
        await self._run(self.svc.update_topic, topic, properties)
        return web.Response(status=200)

    async def get_topic(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        metadata = await self._run(self.svc.get_topic, topic)
        return web.json_response(dict(metadata.properties))

    async def list_topics(self, request: web.Request) -> web.Response:
        namespace = self._namespace(request)
        topics = await self._run(self.svc.list_topics, namespace)
        return web.json_response([t.topic for t in topics])

    async def delete_topic(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        await self._run(self.svc.delete_topic, topic)
        return web.Response(status=200)

    # -- writing ------------------------------------------------------------------------

    async def _store_request(
        self, request: web.Request, topic: TopicId
    ) -> tuple[StoreRequest, str]:
        fmt = self._format(request)
        body = await self._body(request)
        if fmt == AVRO:
            wp, payloads = avro.decode_publish_request(body)
            return StoreRequest(topic, payloads, wp), fmt
        wp, payloads, ttls = jsonc.decode_publish_request(body)
        return StoreRequest(topic, payloads, wp, ttls), fmt

    async def publish(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        store_request, fmt = await self._store_request(request, topic)
        detail = await self.svc.submit_async(Publish(store_request))
        if fmt == JSON:
            return web.Response(
                body=jsonc.encode_publish_response(detail, len(store_request.payloads)),
                content_type=JSON,
            )
        if detail is None:
            return web.Response(status=200)
        return web.Response(body=avro.encode_publish_response(detail), content_type=AVRO)

    async def store(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        store_request, _fmt = await self._store_request(request, topic)
        await self.svc.submit_async(Store(store_request))
        return web.Response(status=200)

    async def rollback(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        body = await self._body(request)
        # The token is echoed back as received: Avro unless the caller says JSON.
        if request.content_type == JSON:
            detail = jsonc.decode_publish_response(body)
        else:
            detail = avro.decode_publish_response(body)
        count = await self.svc.submit_async(Rollback(topic, detail))
        return (
            web.json_response({"rolledBack": count})
            if request.content_type == JSON
            else web.Response()
        )

    async def markers(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        if request.content_type != JSON:
            raise TmsInvalidArgumentError(f"markers take {JSON} bodies")
        pointers, key = jsonc.decode_markers_request(await self._body(request))
        result = await self.svc.submit_async(Markers(MarkersRequest(topic, pointers, key)))
        return web.Response(body=jsonc.encode_markers_response(result), content_type=JSON)

    # -- reading ------------------------------------------------------------------------

    async def _consume_spec(self, request: web.Request) -> tuple[avro.ConsumeSpec, str]:
        """The ConsumeRequest in the body, and the body's format."""
        fmt = self._format(request)
        body = await self._body(request)
        if fmt == AVRO:
            return avro.decode_consume_request(body), fmt
        return jsonc.decode_consume_request(body), fmt

    async def bounds(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        spec, _fmt = await self._consume_spec(request)
        bounds = await self._run(self.svc.bounds, topic, self._fetch_request(spec))
        return web.Response(body=jsonc.encode_bounds(bounds), content_type=JSON)

    @staticmethod
    def _fetch_request(spec: avro.ConsumeSpec) -> FetchRequest:
        return fetch_request_of(spec)

    def _wait_ms(self, request: web.Request) -> int:
        text = request.query.get("wait_ms", "0")
        try:
            wait_ms = int(text)
        except ValueError as exc:
            raise TmsInvalidArgumentError(f"wait_ms must be an integer, got {text!r}") from exc
        if not 0 <= wait_ms <= self.config.max_wait_ms:
            raise TmsInvalidArgumentError(f"wait_ms must be in 0..{self.config.max_wait_ms}")
        return wait_ms

    def _open(
        self, topic: TopicId, request: FetchRequest
    ) -> tuple[MessageFetcher, Iterator[Message], list[Message]]:
        """Start a read (on a worker thread): the fetcher, its messages, the first chunk."""
        fetcher = self.svc.read(topic, request)
        messages = iter(fetcher)
        return fetcher, messages, _take(messages, self.config.chunk_messages)

    async def poll(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        spec, fmt = await self._consume_spec(request)
        fetch_request = self._fetch_request(spec)
        wait_ms = self._wait_ms(request)
        assert self.long_poll is not None

        async def read() -> tuple[MessageFetcher, Iterator[Message], list[Message]]:
            return await self._run(self._open, topic, fetch_request)

        def outcome(
            result: tuple[MessageFetcher, Iterator[Message], list[Message]],
        ) -> tuple[bool, int | None]:
            fetcher, _messages, first = result
            return bool(first), fetcher.held_pointer if fetcher.held else None

        (fetcher, messages, first), finished = await self.long_poll.run(
            topic, wait_ms, read, outcome
        )
        exhausted = len(first) < self.config.chunk_messages
        read_state = _Read(topic, fetcher, messages, first, exhausted, finished)
        return await self._stream(request, fmt, read_state)

    async def _stream(self, request: web.Request, fmt: str, read: _Read) -> web.StreamResponse:
        topic, fetcher, messages, first, exhausted = (
            read.topic,
            read.fetcher,
            read.messages,
            read.first,
            read.exhausted,
        )
        if exhausted:  # all in hand: one plain response, one write
            return self._whole(fmt, read)
        response = web.StreamResponse(status=200)
        response.content_type = fmt
        response.enable_chunked_encoding()
        await response.prepare(request)
        count = 0
        size = 0
        batch = first
        if fmt == JSON:
            await response.write(b'{"messages":[')
        while batch:
            count += len(batch)
            size += sum(len(m[1]) for m in batch)
            if fmt == AVRO:
                for block in avro.encode_consume_blocks(batch, self.config.chunk_bytes):
                    await response.write(block)
            else:
                await response.write(jsonc.encode_messages(batch, first=count == len(batch)))
            if exhausted:
                break
            batch = await self._run(_take, messages, self.config.chunk_messages)
            exhausted = len(batch) < self.config.chunk_messages
        if fmt == AVRO:
            await response.write(avro.ARRAY_END)
        else:
            await response.write(b'],"held":' + (b"true" if fetcher.held else b"false") + b"}")
        await response.write_eof()
        self.svc.metrics.fetched(topic, count, size)
        return response

    def _whole(self, fmt: str, read: _Read) -> web.Response:
        batch = read.first
        if fmt == AVRO:
            body = b"".join(avro.encode_consume_blocks(batch, self.config.chunk_bytes))
            body += avro.ARRAY_END
        else:
            held = b"true" if read.fetcher.held else b"false"
            body = b'{"messages":[' + jsonc.encode_messages(batch, first=True) + b'],"held":'
            body += held + b"}"
        response = web.Response(body=body, content_type=fmt)
        if read.fetcher.held:
            response.headers["X-Tms-Held"] = "true"
            if read.finished:
                response.headers["X-Tms-Held-Finished"] = "true"
        self.svc.metrics.fetched(read.topic, len(batch), sum(len(m[1]) for m in batch))
        return response

    async def inspect(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        query = request.query
        try:
            start_ms = int(query.get("start_ms", "0"))
            end_ms = int(query["end_ms"]) if "end_ms" in query else None
            limit = int(query.get("limit", "1000"))
        except ValueError as exc:
            raise TmsInvalidArgumentError(
                f"start_ms, end_ms and limit must be integers: {exc}"
            ) from exc
        if start_ms < 0 or not 0 < limit <= 100_000:
            raise TmsInvalidArgumentError("start_ms must be >= 0 and limit in 1..100000")
        report = await self._run(self.svc.inspect, topic, start_ms, end_ms, limit)
        return web.json_response(report)

    # -- misc ---------------------------------------------------------------------------

    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(text="OK.\n")

    async def metrics(self, request: web.Request) -> web.Response:
        body = await self._run(self.svc.metrics.exposition)  # topic sizes read storage
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_spec(ROUTES))


API: web.AppKey[Api] = web.AppKey("api", Api)


def _take(messages: Any, n: int) -> list[Message]:
    return list(islice(messages, n))


def create_app(
    service: MessagingService,
    config: HttpConfig | None = None,
    authorizer: Authorizer | None = None,
    tx_watch: TxWatch | None = None,
) -> web.Application:
    """The application with exactly the routes of ``tms.http.routes.ROUTES``; the caller
    runs it (``tms.http.server``) and owns ``service``. ``tx_watch``: the transaction
    manager, for the console and the table debugger (None: not known)."""
    config = config or HttpConfig()
    pool = ThreadPoolExecutor(max_workers=config.worker_threads, thread_name_prefix="tms-http")
    api = Api(service, config, authorizer, pool, tx_watch)
    tasks: list[asyncio.Task[None]] = []
    metrics = service.metrics
    declared: dict[object, Route] = {}

    @web.middleware
    async def errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        response: web.StreamResponse
        try:
            response = await handler(request)
        except NotOwnerError as exc:
            # 307: the owner takes the same request (method and body kept)
            status = 307 if exc.owner_url else 503
            response = error_response(status, exc.code, str(exc))
            if exc.owner_url:
                response.headers["Location"] = exc.owner_url.rstrip("/") + request.path_qs
        except TmsError as exc:
            response = error_response(exc.status, exc.code, str(exc))
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = error_response(exc.status, code_for_status(exc.status), exc.reason)
        except Exception as exc:
            log.exception("internal error on %s %s", request.method, request.path)
            response = error_response(500, "internal_error", f"internal error: {exc!r}")
        metrics.http_request(
            _route_of(request), request.method, response.status, time.perf_counter() - started
        )
        return response

    @web.middleware
    async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
        assert authorizer is not None
        authorize(authorizer, declared.get(request.match_info.route), request)
        return await handler(request)

    middlewares = [errors_and_metrics] if authorizer is None else [errors_and_metrics, access]
    app = web.Application(client_max_size=config.max_request_bytes, middlewares=middlewares)
    for route in ROUTES:
        registered = app.router.add_route(route.method, route.path, getattr(api, route.handler))
        declared[registered] = route

    async def on_startup(app: web.Application) -> None:
        api.waiters = TopicWaiters(asyncio.get_running_loop())
        api.long_poll = LongPoll(
            api.waiters,
            service.guard,
            pool,
            recheck_s=config.held_recheck_ms / 1000,
            watch_s=config.held_watch_ms / 1000 or None,
            metrics=service.metrics,
        )
        service.add_listener(api.waiters.listener)
        service.add_finish_listener(api.waiters.finish_listener)
        tasks.append(asyncio.get_running_loop().create_task(sample_forever(api, service.now_ms)))

    async def on_cleanup(app: web.Application) -> None:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if api.long_poll is not None:
            api.long_poll.close()
        if api.waiters is not None:
            service.remove_listener(api.waiters.listener)
            service.remove_finish_listener(api.waiters.finish_listener)
        pool.shutdown(wait=True)

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app[API] = api
    return app
