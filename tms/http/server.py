"""Running the REST service: on the caller's event loop (``HttpServer``) or on a thread
of its own (``HttpServerThread``, for tests and embedding)."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web

from tms.http.app import HttpConfig, create_app
from tms.http.auth import Authorizer
from tms.service import MessagingService
from txn.rpc.server import new_event_loop

__all__ = ["HttpServer", "HttpServerThread"]


class HttpServer:
    def __init__(
        self,
        service: MessagingService,
        config: HttpConfig | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.config = config or HttpConfig()
        self.app = create_app(service, self.config, authorizer)
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=30.0)
        self.address: tuple[str, int] = (self.config.host, self.config.port)

    async def start(self) -> tuple[str, int]:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        sockname = self._runner.addresses[0]
        self.address = (sockname[0], sockname[1])
        return self.address

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests (up to 30 s), release the app."""
        await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://{self.address[0]}:{self.address[1]}"


class HttpServerThread:
    """An ``HttpServer`` on its own event-loop thread."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self._loop = new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tms-http-loop", daemon=True
        )

    def start(self) -> str:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(timeout=30)
        return self.server.url

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
