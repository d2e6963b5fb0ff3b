"""Running the REST service: on the caller's event loop (``HttpServer``) or on a thread
of its own (``HttpServerThread``, for tests and embedding).

With ``HttpConfig.tls_cert_file`` the service speaks HTTPS only (TLS 1.2 or later, the
``ssl`` module's server defaults); a certificate or key that does not load is a
``TmsInvalidArgumentError`` when the server is made.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Protocol

from aiohttp import web

from tms.errors import TmsInvalidArgumentError
from tms.http.app import create_app
from tms.http.auth import Authorizer
from tms.http.config import HttpConfig
from tms.http.protocol import Site
from tms.service import MessagingService
from tms.txwatch import TxWatch
from txms_common.loop import new_event_loop

__all__ = ["HttpServer", "HttpServerThread", "server_ssl_context", "ssl_context"]


class HttpServer:
    def __init__(
        self,
        service: MessagingService,
        config: HttpConfig | None = None,
        authorizer: Authorizer | None = None,
        tx_watch: TxWatch | None = None,
    ) -> None:
        self.config = config or HttpConfig()
        self._ssl = server_ssl_context(self.config)
        self.app = create_app(service, self.config, authorizer, tx_watch)
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=30.0)
        self.address: tuple[str, int] = (self.config.host, self.config.port)
        self._stopped = False

    async def start(self) -> tuple[str, int]:
        await self._runner.setup()
        site = Site(
            self._runner,
            self.config.host,
            self.config.port,
            idle_timeout_s=self.config.idle_timeout_s,
            header_timeout_s=self.config.header_timeout_s,
            ssl_context=self._ssl,
        )
        try:
            await site.start()
        except BaseException:
            await self.stop()  # e.g. the port is taken: release the app
            raise
        sockname = self._runner.addresses[0]
        self.address = (sockname[0], sockname[1])
        return self.address

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests (up to 30 s), release the app.
        Idempotent."""
        if not self._stopped:
            self._stopped = True
            server = self._runner.server
            handlers = server.connections if server is not None else []
            transports = [h.transport for h in handlers if h.transport is not None]
            await self._runner.cleanup()
            # A closed TLS connection stays open until the peer answers its close_notify,
            # which an idle keep-alive client never does: drop what is left.
            for transport in transports:
                transport.abort()
            await asyncio.sleep(0)  # the aborted connections' callbacks

    @property
    def url(self) -> str:
        return f"{self.config.scheme}://{self.address[0]}:{self.address[1]}"


def server_ssl_context(config: HttpConfig) -> ssl.SSLContext | None:
    """The server's TLS context, None without a certificate."""
    return ssl_context(config.tls_cert_file, config.tls_key_file)


def ssl_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """A server's TLS context (TLS 1.2 or later) from PEM files, None without a
    certificate; ``TmsInvalidArgumentError`` when they do not load."""
    if cert_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        files = cert_file + (f" and {key_file}" if key_file else "")
        raise TmsInvalidArgumentError(
            f"cannot load the TLS certificate from {files}: {exc}"
        ) from exc
    return context


class _Serving(Protocol):
    async def start(self) -> tuple[str, int]: ...

    async def stop(self) -> None: ...

    @property
    def url(self) -> str: ...


class HttpServerThread:
    """An ``HttpServer`` (or any server with async ``start``/``stop`` and a ``url``, like
    ``tms.rpc.server.RpcServer``) on its own event-loop thread."""

    def __init__(self, server: _Serving) -> None:
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
