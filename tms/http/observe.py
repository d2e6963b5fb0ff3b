"""Routes for looking at the service rather than using it: topic stats
(``tms.stats``), the newest messages with their transactional status (the table
debugger, ``tms.inspect.recent_messages``), the transaction manager's state
(``tms.txwatch``) and the metrics over time (``tms.history``).

``ObserveApi`` is a part of ``tms.http.app.Api``: its handlers are named in
``tms.http.routes.ROUTES`` like the others, with their access declared there.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from tms.errors import TmsError, TmsInvalidArgumentError
from tms.history import MetricsHistory
from tms.ids import MessageId
from tms.inspect import MAX_RECENT
from tms.model import TopicId, validate_namespace
from tms.service import MessagingService
from tms.txwatch import TxWatch

__all__ = ["ObserveApi", "sample_forever"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class ObserveApi:
    svc: MessagingService
    pool: ThreadPoolExecutor
    tx_watch: TxWatch | None
    history: MetricsHistory | None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def topic_stats(self, request: web.Request) -> web.Response:
        topic = TopicId(request.match_info["namespace"], request.match_info["topic"])
        stats = await self._call(self.svc.topic_stats, topic)
        return web.json_response(stats.to_json())

    async def namespace_stats(self, request: web.Request) -> web.Response:
        namespace = validate_namespace(request.match_info["namespace"])
        stats = await self._call(self.svc.namespace_stats, namespace)
        return web.json_response([s.to_json() for s in stats])

    async def recent_messages(self, request: web.Request) -> web.Response:
        topic = TopicId(request.match_info["namespace"], request.match_info["topic"])
        text = request.query.get("limit", "50")
        try:
            limit = int(text)
        except ValueError:
            raise TmsInvalidArgumentError(f"limit must be an integer, got {text!r}") from None
        if not 0 < limit <= MAX_RECENT:
            raise TmsInvalidArgumentError(f"limit must be in 1..{MAX_RECENT}")
        before = request.query.get("before")
        position = MessageId.from_hex(before) if before else None
        return web.json_response(await self._call(self._recent, topic, limit, position))

    def _recent(self, topic: TopicId, limit: int, before: MessageId | None) -> dict[str, Any]:
        self.svc.get_topic(topic)  # an unknown topic: 404 before asking the manager
        snapshot = None
        judged = "none"
        if self.tx_watch is not None:
            try:
                snapshot = self.tx_watch.snapshot()
                judged = "fresh"
            except TmsError as exc:  # still list the messages, unjudged
                log.warning("table debugger: %s", exc)
                judged = "unavailable"
        result = self.svc.recent_messages(topic, limit=limit, before=before, snapshot=snapshot)
        for message in result["messages"]:
            message["payload"] = base64.b64encode(message["payload"]).decode()
        result["snapshot"] = (
            None
            if snapshot is None
            else {
                "readPointer": snapshot.read_pointer,
                "inProgress": sum(t != snapshot.transaction_id for t in snapshot.in_progress),
                "invalid": len(snapshot.invalids),
            }
        )
        result["judged"] = judged
        return result

    async def transactions(self, request: web.Request) -> web.Response:
        if self.tx_watch is None:
            return web.json_response({"manager": None})
        return web.json_response(await self._call(self.tx_watch.to_json))

    async def metrics_history(self, request: web.Request) -> web.Response:
        assert self.history is not None
        return web.json_response(self.history.to_json())


async def sample_forever(api: ObserveApi, now_ms: Callable[[], int], *, tx_every: int = 5) -> None:
    """Sample the metrics every ``history.interval_s`` and the transaction manager every
    ``tx_every`` samples, until cancelled (a task of the app)."""
    history = api.history
    if history is None or history.interval_s <= 0:
        return
    count = 0
    while True:
        history.sample(now_ms())
        if api.tx_watch is not None and count % tx_every == 0:
            try:
                await api._call(api.tx_watch.sample)
            except TmsError as exc:
                log.debug("transaction manager not sampled: %s", exc)
        count += 1
        await asyncio.sleep(history.interval_s)
