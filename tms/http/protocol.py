"""The connection level of the REST service: aiohttp's request handler, made to keep the
service's promises where the application never sees the request.

* **Every error body is the documented JSON** ``{"error": CODE, "message": TEXT}``: what
  aiohttp answers by itself — a request line or header it cannot parse or that is over
  the line limit, an ``Expect`` it does not support, a failure outside the application —
  goes through ``error_response`` too (``handle_error`` and, for anything else,
  ``finish_response``).
* **Header timeout**: a request whose line and headers have not all arrived
  ``header_timeout_s`` after its first byte is answered 408 and its connection closed (a
  client that sends half a request line and stops holds nothing for long). The close
  *lingers*: the answer is sent, the sending side shut down, and whatever the client still
  sends is read and dropped until it closes too (at most ``LINGER_S``). Closing at once
  while the client is still sending would make the kernel answer its next bytes with a
  reset, and a reset can destroy the 408 before the client has read it.
* **Idle timeout**: a connection with no request in progress is closed after
  ``idle_timeout_s`` (aiohttp's keep-alive timeout, armed at accept and after each
  answer; a request in progress, a long poll included, is never cut).

``Site`` listens on TCP, with TLS when given a context, using this handler.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong

__all__ = ["JSON", "RequestHandler", "Site", "code_for_status", "error_response"]

log = logging.getLogger(__name__)

JSON = "application/json"
LINGER_S = 2.0
"""How long a connection closed by the server reads and drops what the client still sends."""

_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "request_too_large",
    417: "expectation_failed",
    500: "internal_error",
    504: "timeout",
}


def code_for_status(status: int) -> str:
    """The error code of an error the application did not raise itself."""
    return _CODES.get(status, "http_error")


def error_response(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


class RequestHandler(web.RequestHandler):
    """aiohttp's handler with JSON errors and a header timeout (module docstring)."""

    def __init__(
        self, manager: web.Server, *, loop: asyncio.AbstractEventLoop, header_timeout_s: float,
        **options: Any,
    ) -> None:  # fmt: skip
        super().__init__(manager, loop=loop, **options)
        self._tms_loop = loop
        self._header_timeout_s = header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None
        self._unanswered = 0
        """Requests whose headers were read and whose answer is not yet written."""
        self._linger_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self._linger_timer is not None:
            return  # closing: the client's late bytes are dropped (see the docstring)
        # aiohttp counts the requests its parser completed (headers read) per connection;
        # a private attribute, guarded by the header-timeout tests.
        before = self._request_count
        super().data_received(data)
        parsed = self._request_count - before
        if parsed:
            self._unanswered += parsed
            self._cancel_header_timer()
        elif data and not self._unanswered and self._header_timer is None:
            # The first bytes of a request: its headers must be complete in time.
            self._header_timer = self._tms_loop.call_later(
                self._header_timeout_s, self._header_timed_out
            )

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        transport = self.transport
        if self._unanswered or transport is None or transport.is_closing():
            return
        body = json.dumps(
            {
                "error": "request_timeout",
                "message": (
                    f"the request line and headers did not arrive within "
                    f"{self._header_timeout_s:g} s"
                ),
            }
        ).encode()
        head = (
            "HTTP/1.1 408 Request Timeout\r\n"
            f"Content-Type: {JSON}; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        if not transport.can_write_eof():  # TLS cannot half-close: close at once
            self.force_close()  # closes after the buffered answer is written
            return
        transport.write_eof()
        self._linger_timer = self._tms_loop.call_later(LINGER_S, self.force_close)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """See aiohttp; the answer is JSON, and the connection is closed after it."""
        if request.writer.output_size > 0:  # part of an answer is out: nothing to add
            raise ConnectionError("an answer was already started; cannot send an error")
        if status >= 500:
            log.error("error handling a request from %s", request.remote, exc_info=exc)
            text = "internal error" if status == 500 else (message or "timed out")
        elif isinstance(exc, LineTooLong):
            limit = max(self.max_line_size, self.max_field_size)
            text = f"the request line or a header is longer than the limit ({limit} bytes)"
        else:
            log.debug("bad request from %s: %s", request.remote, message, exc_info=exc)
            text = message or "the request could not be parsed"
        response = error_response(status, code_for_status(status), text)
        response.force_close()
        return response

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        try:
            if not resp.prepared and resp.status >= 400 and resp.content_type != JSON:
                # An error answered outside the application (e.g. a refused Expect).
                reason = resp.reason or "error"
                text = resp.text if isinstance(resp, web.Response) and resp.text else reason
                json_resp = error_response(resp.status, code_for_status(resp.status), text)
                if resp.keep_alive is False:
                    json_resp.force_close()
                resp = json_resp
            return await super().finish_response(request, resp, start_time)
        finally:
            self._unanswered = max(0, self._unanswered - 1)


class Site(web.BaseSite):
    """Listens on ``host:port`` (TLS with ``ssl_context``) with ``RequestHandler``."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        idle_timeout_s: float,
        header_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._idle_timeout_s = idle_timeout_s
        self._header_timeout_s = header_timeout_s

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        manager = self._runner.server
        assert manager is not None, "runner.setup() first"
        idle, header = self._idle_timeout_s, self._header_timeout_s

        def handler() -> RequestHandler:
            return RequestHandler(
                manager,
                loop=loop,
                header_timeout_s=header,
                keepalive_timeout=idle,
                access_log=None,
            )

        self._server = await loop.create_server(
            handler,
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=header if self._ssl_context is not None else None,
            backlog=self._backlog,
            reuse_address=True,
        )
