"""``AsyncChannel``: one connection of the binary protocol on an asyncio event loop;
``AsyncChannelPool``: a client's channels. The asyncio counterparts of
``tms.client.channel`` (same failures: ``ChannelError`` with ``sent``).

Requests are futures (``request``) or callbacks (``request_then``) keyed by request id;
the protocol resolves them as responses arrive, in any order, so any number of tasks
share a channel. A callback is called at once with the response frame or the
``ChannelError``, without a future and a loop turn between: what a producer sending many
small requests saves per request. Frames requested in one
turn of the loop leave in one write. A request that gets no answer in time fails alone
(a sweep every ``_SWEEP_S`` expires them; the late answer is dropped); a connection
that breaks fails every request waiting on it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

from tms.client.channel import MIN_MAX_FRAME, ChannelError, error_of, hello_body, welcome_of
from tms.errors import TmsError
from tms.rpc.endpoints import Address, Endpoints
from tms.rpc.frames import (
    Frame,
    FrameError,
    Kind,
    encode_frame,
    read_frames,
)

__all__ = ["AsyncChannel", "AsyncChannelPool"]

_REQUEST = int(Kind.REQUEST)
_PING = int(Kind.PING)
_RESPONSE = int(Kind.RESPONSE)
_PONG = int(Kind.PONG)
_GOAWAY = int(Kind.GOAWAY)
_SWEEP_S = 0.05

Answer = Callable[["Frame | ChannelError"], None]
"""Called once with a request's response frame, or the ``ChannelError`` it failed with."""


def _resolve(future: asyncio.Future[Frame], answer: Frame | ChannelError) -> None:
    if future.done():
        return
    if isinstance(answer, ChannelError):
        future.set_exception(answer)
    else:
        future.set_result(answer)


class _Protocol(asyncio.Protocol):
    def __init__(self, channel: AsyncChannel) -> None:
        self._channel = channel
        self._buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._channel.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        channel = self._channel
        try:
            frames, used = read_frames(buf, channel.max_frame)
        except FrameError as exc:
            channel.fail(f"{channel.where} sent a bad frame: {exc}")
            return
        if frames:
            del buf[:used]
            channel.dispatch(frames)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self._channel.fail(f"{self._channel.where} closed the connection{reason}")


class AsyncChannel:
    """See the module docstring. Made by ``AsyncChannel.open``."""

    def __init__(
        self, address: Address, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.address = address
        self.where = f"{address[0]}:{address[1]}"
        self.transport: asyncio.Transport | None = None
        self.max_frame = MIN_MAX_FRAME
        self.welcome: Any = None
        self.goaway: Exception | None = None
        self.last_used = monotonic()
        self._monotonic = monotonic
        self._loop = asyncio.get_running_loop()
        self._pending: dict[int, tuple[Answer, float]] = {}
        self._next_id = 0
        self._outbox: list[bytes] = []
        self._dead: str | None = None
        self._sweeping = False

    @classmethod
    async def open(
        cls,
        address: Address,
        *,
        token: str | None,
        client_id: str | None,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> AsyncChannel:
        """Connect and say hello (see ``tms.client.channel.Channel.open``)."""
        channel = cls(address, monotonic=monotonic)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Protocol(channel),
                    address[0],
                    address[1],
                    ssl=ssl_context,
                    server_hostname=address[0] if ssl_context is not None else None,
                ),
                timeout_s,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ChannelError(f"cannot connect to {channel.where}: {exc!r}", sent=False) from exc
        try:
            frame = await channel.request(0, hello_body(token, client_id), timeout_s=timeout_s)
            channel.welcome, channel.max_frame = welcome_of(frame)
        except ChannelError as exc:
            channel.close()
            raise ChannelError(str(exc), sent=False) from exc
        except TmsError:
            channel.close()
            raise
        return channel

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def dead(self) -> bool:
        return self._dead is not None or self.goaway is not None

    def request(
        self,
        op: int,
        body: bytes,
        *,
        timeout_s: float,
        queue_timeout_ms: int = 0,
        trace: tuple[int, int] | None = None,
        kind: int = _REQUEST,
    ) -> asyncio.Future[Frame]:
        """Send a request now; the future gets its response frame, or ``ChannelError``."""
        future: asyncio.Future[Frame] = self._loop.create_future()
        self.request_then(
            op,
            body,
            partial(_resolve, future),
            timeout_s=timeout_s,
            queue_timeout_ms=queue_timeout_ms,
            trace=trace,
            kind=kind,
        )
        return future

    def request_then(
        self,
        op: int,
        body: bytes,
        answer: Answer,
        *,
        timeout_s: float,
        queue_timeout_ms: int = 0,
        trace: tuple[int, int] | None = None,
        kind: int = _REQUEST,
    ) -> None:
        """Send a request now; ``answer`` is called once, on the loop, with its response
        frame or ``ChannelError`` (raised here instead when it cannot be sent)."""
        if self._dead is not None:
            raise ChannelError(self._dead, sent=False)
        if self.goaway is not None:
            raise ChannelError(f"the server is closing this connection: {self.goaway}", sent=False)
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF or 1
        request_id = self._next_id
        now = self._monotonic()
        self._pending[request_id] = (answer, now + timeout_s)
        self.last_used = now
        if not self._outbox:
            self._loop.call_soon(self._flush)
        self._outbox.append(
            encode_frame(kind, op, request_id, body, timeout_ms=queue_timeout_ms, trace=trace)
        )
        if not self._sweeping:
            self._sweeping = True
            self._loop.call_later(_SWEEP_S, self._sweep)

    async def ping(self, timeout_s: float) -> None:
        await self.request(0, b"", timeout_s=timeout_s, kind=_PING)

    def _flush(self) -> None:
        outbox = self._outbox
        if outbox and self.transport is not None and self._dead is None:
            self.transport.write(b"".join(outbox) if len(outbox) > 1 else outbox[0])
        outbox.clear()

    def _sweep(self) -> None:
        now = self._monotonic()
        late = [rid for rid, (_, deadline) in self._pending.items() if deadline <= now]
        for rid in late:
            answer, _ = self._pending.pop(rid)
            answer(ChannelError(f"no answer from {self.where} in time", sent=True))
        if self._pending and self._dead is None:
            self._loop.call_later(_SWEEP_S, self._sweep)
        else:
            self._sweeping = False

    def dispatch(self, frames: list[Frame]) -> None:
        pending = self._pending
        for frame in frames:
            kind = frame.kind
            if kind in (_RESPONSE, _PONG):
                entry = pending.pop(frame.request_id, None)
                if entry is not None:
                    entry[0](frame)
            elif kind == _GOAWAY:
                self.goaway = error_of(frame)
            else:
                self.fail(f"{self.where} sent a frame of kind {kind}")
                return

    def fail(self, reason: str) -> None:
        if self._dead is None:
            if self.goaway is not None:
                reason = f"{reason} ({self.goaway})"
            self._dead = reason
        pending, self._pending = self._pending, {}
        for answer, _ in pending.values():
            answer(ChannelError(self._dead, sent=True))
        if self.transport is not None:
            self.transport.close()

    def usable(self, max_idle_s: float) -> bool:
        if self.dead:
            return False
        return bool(self._pending) or self._monotonic() - self.last_used < max_idle_s

    def close(self) -> None:
        self.fail("the client closed the connection")


class AsyncChannelPool:
    """See ``tms.client.channel.ChannelPool``; use from one event loop."""

    def __init__(
        self,
        endpoints: Endpoints,
        opener: Callable[[Address], Awaitable[AsyncChannel]],
        size: int,
    ) -> None:
        self.endpoints = endpoints
        self._open = opener
        self._size = size
        self._channels: list[AsyncChannel] = []
        self._opening = 0
        self._opened = asyncio.Condition()
        self._closed = False

    async def acquire(self) -> AsyncChannel:
        while True:
            if self._closed:
                raise ChannelError("the client is closed", sent=False)
            best = None
            for open_ in list(self._channels):
                idle_ms = getattr(open_.welcome, "idle_timeout_ms", 0) or 0
                if not open_.usable(0.75 * idle_ms / 1000 if idle_ms else float("inf")):
                    self._channels.remove(open_)
                    open_.close()
                elif best is None or open_.in_flight < best.in_flight:
                    best = open_
            full = len(self._channels) + self._opening >= self._size
            if best is not None and (best.in_flight == 0 or full):
                return best
            if not full:
                break
            async with self._opened:  # the first channel is being opened
                await self._opened.wait()
        self._opening += 1
        channel: AsyncChannel | None = None
        try:
            address = self.endpoints.pick()
            try:
                channel = await self._open(address)
            except ChannelError:
                self.endpoints.failed(address)
                raise
            self.endpoints.succeeded(address)
        finally:
            self._opening -= 1
            if channel is not None and not self._closed:
                self._channels.append(channel)
            async with self._opened:
                self._opened.notify_all()
        assert channel is not None
        if self.closed():  # closed while connecting
            channel.close()
            raise ChannelError("the client is closed", sent=False)
        return channel

    def ready(self) -> AsyncChannel | None:
        """An open channel to send on now (the least busy), if there is one."""
        best = None
        for channel in self._channels:
            if not channel.dead and (best is None or channel.in_flight < best.in_flight):
                best = channel
        return best

    def closed(self) -> bool:
        return self._closed

    def discard(self, channel: AsyncChannel) -> None:
        if channel in self._channels:
            self._channels.remove(channel)
        channel.close()

    def close(self) -> None:
        self._closed = True
        channels, self._channels = self._channels, []
        for channel in channels:
            channel.close()
