"""The binary protocol's server (docs/rpc.md): ``tms serve --rpc-port P``.

It runs on the caller's event loop (uvloop where available, beside the REST service in
``tms serve`` and the standalone stack) over the same ``MessagingService``. Each
connection is a ``tms.rpc.connection.Connection``; what the operations do is
``tms.rpc.backend.Backend``. Authentication and grants are the REST service's
(``tms.http.auth``): the token travels in the connection's hello. With a certificate
(``RpcConfig.tls_cert_file``) it speaks TLS only (clients use ``tmss://``).

A timer closes connections whose hello has not come within ``handshake_timeout_s``,
whose unfinished frame has not completed within ``frame_timeout_s``, and, with nothing
in progress, those quiet for ``idle_timeout_s`` (clients ping to keep one open).

``stop`` stops accepting and reading, answers the long polls waiting (``unavailable``:
the server is stopping), waits up to ``drain_s`` for the requests in progress, then
sends every client GOAWAY ``shutting_down`` and closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tms.http.auth import Authorizer
from tms.http.server import ssl_context
from tms.rpc.backend import Backend
from tms.rpc.config import RpcConfig
from tms.rpc.connection import LINGER_S, Connection
from tms.service import MessagingService

__all__ = ["RpcServer"]

log = logging.getLogger(__name__)


class RpcServer:
    def __init__(
        self,
        service: MessagingService,
        config: RpcConfig | None = None,
        authorizer: Authorizer | None = None,
        *,
        http_port: int = 0,
        http_tls: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``http_port``/``http_tls``: where this service's REST API listens, told to
        clients in the hello's answer (admin operations stay on REST)."""
        self.config = config or RpcConfig()
        self.service = service
        self.authorizer = authorizer
        self.http_port = http_port
        self.http_tls = http_tls
        self.monotonic = monotonic
        self._ssl = ssl_context(self.config.tls_cert_file, self.config.tls_key_file)
        self.connections: set[Connection] = set()
        self.address: tuple[str, int] = (self.config.host, self.config.port)
        self._pool: ThreadPoolExecutor | None = None
        self._server: asyncio.AbstractServer | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._backend: Backend | None = None
        self._stopped = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "not started"
        return self._loop

    @property
    def backend(self) -> Backend:
        assert self._backend is not None, "not started"
        return self._backend

    @property
    def url(self) -> str:
        scheme = "tmss" if self._ssl is not None else "tms"
        return f"{scheme}://{self.address[0]}:{self.address[1]}"

    async def start(self) -> tuple[str, int]:
        """Listen; the address it listens on (``OSError`` when it cannot)."""
        loop = self._loop = asyncio.get_running_loop()
        config = self.config
        self._pool = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="tms-rpc")
        self._backend = Backend(
            self.service,
            self._pool,
            loop,
            max_wait_ms=config.max_wait_ms,
            max_poll_bytes=config.max_poll_bytes,
            monotonic=self.monotonic,
        )
        try:
            self._server = await loop.create_server(
                lambda: Connection(self),
                config.host,
                config.port,
                ssl=self._ssl,
                ssl_handshake_timeout=config.handshake_timeout_s if self._ssl else None,
                backlog=1024,
            )
        except BaseException:
            await self.stop()
            raise
        sockname = self._server.sockets[0].getsockname()
        self.address = (sockname[0], sockname[1])
        self._schedule()
        return self.address

    def _schedule(self) -> None:
        c = self.config
        period = max(0.05, min(c.idle_timeout_s, c.handshake_timeout_s, c.frame_timeout_s) / 4)
        self._timer = self.loop.call_later(period, self._check)

    def _check(self) -> None:
        """Close the connections past one of their timeouts."""
        now = self.monotonic()
        c = self.config
        for conn in list(self.connections):
            if conn.closing:
                continue
            if not conn.welcomed and now - conn.accepted > c.handshake_timeout_s:
                conn.goaway("handshake_timeout", f"no hello within {c.handshake_timeout_s} s")
            elif conn.partial_since is not None and now - conn.partial_since > c.frame_timeout_s:
                conn.goaway("frame_timeout", f"a frame unfinished for {c.frame_timeout_s} s")
            elif conn.in_flight == 0 and now - conn.last_rx > c.idle_timeout_s:
                conn.goaway("idle_timeout", f"nothing received for {c.idle_timeout_s} s")
        if not self._stopped:
            self._schedule()

    async def stop(self, drain_s: float = 30.0) -> None:
        """See the module docstring. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.pause("draining")
        if self._backend is not None:
            self._backend.close()  # waiting polls answer now
        deadline = self.monotonic() + drain_s
        while any(c.in_flight for c in self.connections) and self.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.goaway("shutting_down", "the server is stopping")
        deadline = self.monotonic() + LINGER_S
        while self.connections and self.monotonic() < deadline:
            await asyncio.sleep(0.01)  # clients read their GOAWAY and close
        for conn in list(self.connections):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
