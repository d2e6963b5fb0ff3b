"""``Channel``: one connection of the binary protocol (docs/rpc.md), shared by threads;
``ChannelPool``: a client's channels.

Many threads may call on one channel at once: each sends its request (frames are written
whole, under a lock) and waits for the response with its request id, which may come
back in any order. There is no reader thread: a waiting caller reads the socket itself
while no other caller does, hands every response it reads to its caller, and passes
the reading on when its own has come. So a lone caller pays no thread switch per call.

Failures are ``ChannelError``: ``sent`` False when the request certainly did not reach
the server (it may be sent again, even a publish), True when it may have (the outcome
is unknown). A channel that fails is dead: its waiting callers fail with it. A caller
that times out gives up its own request only; the channel goes on (a late answer is
dropped).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from tms.errors import (
    NotOwnerError,
    RequestTimeoutError,
    ServiceUnavailableError,
    TmsError,
    TmsTransientError,
    error_for,
)
from tms.rpc.endpoints import Address, Endpoints
from tms.rpc.frames import (
    FLAG_ERROR,
    PROTOCOL_VERSION,
    Frame,
    FrameError,
    Kind,
    decode_body,
    encode_body,
    encode_frame,
    read_frames,
    rpc,
)
from tms.rpc.ops import Op

__all__ = [
    "MIN_MAX_FRAME",
    "RETRY",
    "Channel",
    "ChannelError",
    "ChannelPool",
    "answer_of",
    "check_retry",
    "error_of",
    "hello_body",
    "may_retry",
    "unavailable",
    "welcome_of",
]

_RESPONSE = int(Kind.RESPONSE)
_PONG = int(Kind.PONG)
_GOAWAY = int(Kind.GOAWAY)
_REQUEST = int(Kind.REQUEST)
_PING = int(Kind.PING)
MIN_MAX_FRAME = 64 * 1024 * 1024
"""Responses up to this size are read whatever the server's own limit (a poll answers
about half of that limit in payloads, plus ids and framing)."""


class ChannelError(Exception):
    """The channel failed; ``sent``: the request may have reached the server."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


def hello_body(token: str | None, client_id: str | None) -> bytes:
    """The body of a connection's first request."""
    return encode_body(rpc.Hello(version=PROTOCOL_VERSION, token=token, client_id=client_id))


def welcome_of(frame: Frame) -> tuple[Any, int]:
    """The server's answer to the hello, and the largest response to read from it; the
    error it refused the connection with is raised."""
    if frame.flags & FLAG_ERROR:
        raise error_of(frame)
    welcome = decode_body(rpc.Welcome, frame.body)
    return welcome, max(MIN_MAX_FRAME, 2 * (welcome.max_frame_bytes or 0))


def error_of(frame: Frame, topic: object = None) -> TmsError:
    """The ``tms`` error an ERROR response (or GOAWAY) carries."""
    try:
        error = decode_body(rpc.Error, frame.body)
        code, message, owner = error.code, error.message, error.owner
    except TmsError:
        code, message, owner = None, "an error the client cannot read", None
    if not isinstance(code, str) or not isinstance(message, str):
        code, message = None, str(message)
    found = error_for(code, message, status=0, topic=topic)
    if isinstance(found, NotOwnerError) and isinstance(owner, str):
        found.owner_rpc = owner
    return found


def may_retry(failure: ChannelError | TmsError, retry_lost: bool) -> bool:
    """Whether a request that failed so may be sent again: one that never reached the
    server, or was dropped by it unprocessed (``request_timeout``), always; one whose
    answer was lost, or that failed transiently, only when ``retry_lost`` (idempotent)."""
    if isinstance(failure, ChannelError):
        return retry_lost or not failure.sent
    if isinstance(failure, ServiceUnavailableError):
        return True  # raised before sending (every address shielded)
    return isinstance(failure, TmsTransientError) and (
        retry_lost or isinstance(failure, RequestTimeoutError)
    )


def unavailable(op: str, failure: Exception) -> ServiceUnavailableError:
    """What a request that could not be completed raises."""
    unknown = isinstance(failure, ChannelError) and failure.sent
    note = " (the outcome is unknown)" if unknown else ""
    return ServiceUnavailableError(f"{op}: {failure}{note}")


RETRY: Any = object()
"""What ``answer_of`` returns for an error answer the request may be sent again after."""


def answer_of(op: Op, frame: Frame, *, topic: object = None, retry_lost: bool, again: bool) -> Any:
    """The response struct of ``op``'s answer ``frame``; for an error answer, ``RETRY``
    when ``again`` (attempts are left) and it may be retried (``may_retry``), else the
    error is raised."""
    if not frame.flags & FLAG_ERROR:
        return decode_body(op.response, frame.body)
    error = error_of(frame, topic)
    if again and may_retry(error, retry_lost):
        return RETRY
    raise error


def check_retry(
    op: Op, failure: ChannelError | ServiceUnavailableError, *, retry_lost: bool, again: bool
) -> None:
    """Raise what a request that failed so raises, unless it may be sent again."""
    if not again or not may_retry(failure, retry_lost):
        raise unavailable(op.name, failure) from failure


class _Slot:
    __slots__ = ("done", "error", "frame")

    def __init__(self) -> None:
        self.done = False
        self.frame: Frame | None = None
        self.error: ChannelError | None = None


def _has_news(sock: socket.socket) -> bool:
    """Whether ``sock`` has something to read, or was closed, right now. ``poll`` rather
    than ``select``, which refuses descriptors above 1023 (a busy application has them)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class Channel:
    """See the module docstring. Made by ``Channel.open``."""

    def __init__(
        self,
        sock: socket.socket,
        address: Address,
        *,
        timeout_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self._sock = sock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._send_lock = threading.Lock()
        self._pending: dict[int, _Slot] = {}
        self._next_id = 0
        self._reading = False
        self._buf = bytearray()
        self._dead: str | None = None
        self._max_frame = MIN_MAX_FRAME
        self.welcome: Any = None
        self.goaway: TmsError | None = None
        self.last_used = monotonic()
        sock.settimeout(timeout_s)

    @classmethod
    def open(
        cls,
        address: Address,
        *,
        token: str | None,
        client_id: str | None,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> Channel:
        """Connect and say hello. ``ChannelError(sent=False)`` when the server cannot be
        reached; the ``TmsError`` it answers the hello with (a bad token) as itself."""
        try:
            sock = socket.create_connection(address, timeout=timeout_s)
        except OSError as exc:
            where = f"{address[0]}:{address[1]}"
            raise ChannelError(f"cannot connect to {where}: {exc}", sent=False) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=address[0])
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            where = f"{address[0]}:{address[1]}"
            raise ChannelError(f"TLS with {where} failed: {exc}", sent=False) from exc
        channel = cls(sock, address, timeout_s=timeout_s, monotonic=monotonic)
        try:
            frame = channel.call(0, hello_body(token, client_id), timeout_s=timeout_s)
            channel.welcome, channel._max_frame = welcome_of(frame)
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

    def call(
        self,
        op: int,
        body: bytes,
        *,
        timeout_s: float,
        queue_timeout_ms: int = 0,
        trace: tuple[int, int] | None = None,
        kind: int = _REQUEST,
    ) -> Frame:
        """Send one request and wait up to ``timeout_s`` for its response frame."""
        slot = _Slot()
        with self._lock:
            if self._dead is not None:
                raise ChannelError(self._dead, sent=False)
            if self.goaway is not None:
                raise ChannelError(
                    f"the server is closing this connection: {self.goaway}", sent=False
                )
            self._next_id = (self._next_id + 1) & 0xFFFFFFFF or 1
            request_id = self._next_id
            self._pending[request_id] = slot
        frame = encode_frame(kind, op, request_id, body, timeout_ms=queue_timeout_ms, trace=trace)
        deadline = self._monotonic() + timeout_s
        try:
            with self._send_lock:
                self._sock.sendall(frame)
        except OSError as exc:
            self._fail(f"sending to {self._where()} failed: {exc}")
            raise ChannelError(str(self._dead), sent=True) from exc
        self.last_used = self._monotonic()
        return self._wait(request_id, slot, deadline)

    def ping(self, timeout_s: float) -> None:
        """A PING answered by a PONG (``ChannelError`` otherwise)."""
        self.call(0, b"", timeout_s=timeout_s, kind=_PING)

    def _wait(self, request_id: int, slot: _Slot, deadline: float) -> Frame:
        while True:
            with self._lock:
                while not slot.done and self._reading:
                    remaining = deadline - self._monotonic()
                    if remaining <= 0:
                        self._pending.pop(request_id, None)
                        raise ChannelError(f"no answer from {self._where()} in time", sent=True)
                    self._cond.wait(remaining)
                if slot.done:
                    if slot.error is not None:
                        raise slot.error
                    assert slot.frame is not None
                    return slot.frame
                self._reading = True
            try:
                self._read(request_id, slot, deadline)
            finally:
                with self._lock:
                    self._reading = False
                    self._cond.notify_all()

    def _read(self, request_id: int, slot: _Slot, deadline: float) -> None:
        """Read and hand out responses until ``slot``'s has come (as the reader)."""
        sock = self._sock
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        buffered = sock.pending if isinstance(sock, ssl.SSLSocket) else None
        while not slot.done:
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                with self._lock:
                    if self._pending.pop(request_id, None) is None:
                        return  # answered (or failed) meanwhile
                raise ChannelError(f"no answer from {self._where()} in time", sent=True)
            if (buffered is None or not buffered()) and not poller.poll(remaining * 1000):
                continue
            try:
                data = sock.recv(262144)
            except (TimeoutError, ssl.SSLWantReadError):
                continue
            except OSError as exc:
                self._fail(f"reading from {self._where()} failed: {exc}")
                return
            if not data:
                self._fail(f"{self._where()} closed the connection")
                return
            buf = self._buf
            buf += data
            try:
                frames, used = read_frames(buf, self._max_frame)
            except FrameError as exc:
                self._fail(f"{self._where()} sent a bad frame: {exc}")
                return
            if frames:
                del buf[:used]
                self._dispatch(frames)

    def _dispatch(self, frames: list[Frame]) -> None:
        with self._lock:
            pending = self._pending
            for frame in frames:
                kind = frame.kind
                if kind in (_RESPONSE, _PONG):
                    slot = pending.pop(frame.request_id, None)
                    if slot is not None:
                        slot.frame = frame
                        slot.done = True
                elif kind == _GOAWAY:
                    self.goaway = error_of(frame)
                else:
                    self._fail_locked(f"{self._where()} sent a frame of kind {kind}")
                    return
            self._cond.notify_all()

    def _fail(self, reason: str) -> None:
        with self._lock:
            self._fail_locked(reason)

    def _fail_locked(self, reason: str) -> None:
        if self._dead is None:
            if self.goaway is not None:
                reason = f"{reason} ({self.goaway})"
            self._dead = reason
        error = ChannelError(self._dead, sent=True)
        for slot in self._pending.values():
            slot.error = error
            slot.done = True
        self._pending.clear()
        self._cond.notify_all()
        with contextlib.suppress(OSError):
            self._sock.close()

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def usable(self, max_idle_s: float) -> bool:
        """Not dead, and, when nothing is in flight: not idle for ``max_idle_s``, and
        nothing waiting to be read (a GOAWAY, or the server's close)."""
        if self.dead:
            return False
        if self._pending:
            return True
        idle = self._monotonic() - self.last_used
        if idle >= max_idle_s:
            return False
        if idle >= 1.0:
            with contextlib.suppress(OSError, ValueError):
                if _has_news(self._sock):
                    return False
        return True

    def close(self) -> None:
        self._fail("the client closed the connection")


class ChannelPool:
    """A client's channels: up to ``size``, opened as needed. A call takes an idle
    channel, else opens one while fewer than ``size`` are open (or being opened), else
    pipelines on the least busy one (or waits for the first one to open)."""

    def __init__(self, endpoints: Endpoints, opener: Callable[[Address], Channel], size: int):
        self.endpoints = endpoints
        self._open = opener
        self._size = size
        self._channels: list[Channel] = []
        self._opening = 0
        self._cond = threading.Condition(threading.Lock())
        self._closed = threading.Event()

    def acquire(self) -> Channel:
        with self._cond:
            while True:
                if self._closed.is_set():
                    raise ChannelError("the client is closed", sent=False)
                best = None
                for open_ in list(self._channels):
                    if not open_.usable(self._max_idle(open_)):
                        self._channels.remove(open_)
                        open_.close()
                    elif best is None or open_.in_flight < best.in_flight:
                        best = open_
                full = len(self._channels) + self._opening >= self._size
                if best is not None and (best.in_flight == 0 or full):
                    return best
                if not full:
                    self._opening += 1
                    break
                self._cond.wait(1.0)  # the first channel is being opened
        channel: Channel | None = None
        try:
            address = self.endpoints.pick()
            try:
                channel = self._open(address)
            except ChannelError:
                self.endpoints.failed(address)
                raise
            self.endpoints.succeeded(address)
        finally:
            with self._cond:
                self._opening -= 1
                if channel is not None and not self._closed.is_set():
                    self._channels.append(channel)
                self._cond.notify_all()
        assert channel is not None
        if self._closed.is_set():
            channel.close()
            raise ChannelError("the client is closed", sent=False)
        return channel

    @staticmethod
    def _max_idle(channel: Channel) -> float:
        idle_ms = getattr(channel.welcome, "idle_timeout_ms", 0) or 0
        return 0.75 * idle_ms / 1000 if idle_ms else float("inf")

    def discard(self, channel: Channel) -> None:
        with self._cond:
            if channel in self._channels:
                self._channels.remove(channel)
        channel.close()

    def close(self) -> None:
        with self._cond:
            self._closed.set()
            channels, self._channels = self._channels, []
        for channel in channels:
            channel.close()
