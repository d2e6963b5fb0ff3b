"""Routes for looking at the service rather than using it: topic stats (``tms.stats``).

``ObserveApi`` is a part of ``tms.http.app.Api``: its handlers are named in
``tms.http.routes.ROUTES`` like the others, with their access declared there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from tms.model import TopicId, validate_namespace
from tms.service import MessagingService

__all__ = ["ObserveApi"]

T = TypeVar("T")


class ObserveApi:
    svc: MessagingService
    pool: ThreadPoolExecutor

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
