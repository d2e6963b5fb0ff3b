"""One client connection of the Thrift server: framing, the reply queue, and the
per-connection side of the resource limits (``txn.rpc.limits``).

Frames are cut from the byte stream and handed to the server's ``dispatch`` in order.
Replies leave in request order, each once it is computed and its log ticket durable.
Reading is paused while any reason holds: the client does not read its replies
(``writing``), its unfinished frame waits for the frame budget (``budget``), one of its
calls runs on a worker thread (``busy``; later frames wait in the buffer), or the server
is draining.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from txn.rpc.server import ThriftServer

__all__ = ["Connection", "Slot"]

log = logging.getLogger(__name__)


class Slot:
    """A reply's place in a connection's queue; ``data`` is None until it is computed."""

    __slots__ = ("data", "ticket")

    def __init__(self, ticket: int, data: bytes | None) -> None:
        self.ticket = ticket
        self.data = data


class Connection(asyncio.Protocol):
    def __init__(self, server: ThriftServer) -> None:
        self._server = server
        self._buf = bytearray()
        self.replies: deque[Slot] = deque()
        self.transport: asyncio.Transport | None = None
        self.draining = False
        self.busy = False
        """A call of this connection runs on a worker thread."""
        self.reserved = 0
        """Frame-budget bytes held for the unfinished frame (or the busy call)."""
        self.partial_since: float | None = None
        """Loop time the unfinished frame began (or was granted its budget)."""
        self.last_rx = 0.0
        self._pauses: set[str] = set()

    # asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self.last_rx = self._server.now()
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        server = self._server
        server.connections.discard(self)
        server.waiting.discard(self)
        server.group_commit.forget(self)
        server.budget.forget(self)
        if not self.busy:  # a busy call gives its bytes back when it ends
            self.give_back()
        self._buf = bytearray()

    def pause_writing(self) -> None:
        self.pause("writing")

    def resume_writing(self) -> None:
        self.resume("writing")

    def data_received(self, data: bytes) -> None:
        self._buf += data
        server = self._server
        self.last_rx = server.now()
        server.group_commit.called(self)
        self.process()

    # reading

    @property
    def paused_by_server(self) -> bool:
        """Reading is paused for a reason other than the client's own silence."""
        return bool(self._pauses)

    def pause(self, reason: str) -> None:
        if not self._pauses and self.transport is not None:
            self.transport.pause_reading()
        self._pauses.add(reason)

    def resume(self, reason: str) -> None:
        self._pauses.discard(reason)
        if not self._pauses and self.transport is not None and not self.draining:
            self.transport.resume_reading()

    def process(self) -> None:
        """Dispatch every whole frame in the buffer (until a call goes to a worker), then
        hold a budget reservation for what is left of an unfinished one."""
        buf = self._buf
        server = self._server
        limit = server.config.max_frame_bytes
        end = len(buf)
        pos = 0
        while end - pos >= 4 and not self.busy:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if size <= 0 or size > limit:
                self.abort(f"bad frame length {size}")
                return
            if end - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            if not server.dispatch(self, frame):
                return
            if not self.busy:
                self.give_back()  # the frame is done with (a busy call keeps it)
        if pos:
            del buf[:pos]
        if not buf:
            self.partial_since = None
        elif not self.busy:
            if self.partial_since is None:
                self.partial_since = server.now()
            if not self.reserved and len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big", signed=True)
                if server.budget.reserve(self, size):
                    self.reserved = size
                else:
                    self.pause("budget")
        self.flush()
        if self.replies:
            server.group_commit.request()

    def granted(self, size: int) -> None:
        """The frame budget granted the reservation this connection waited for."""
        self.reserved = size
        self.partial_since = self._server.now()
        self.resume("budget")

    def give_back(self) -> None:
        """Release this connection's reservation (its frame is done, or it closed)."""
        if self.reserved:
            size, self.reserved = self.reserved, 0
            self._server.release_budget(size)

    def call_done(self) -> None:
        """The call on a worker thread finished: go on with the frames behind it."""
        self.busy = False
        self.give_back()
        if self.transport is None:
            return
        self.resume("busy")
        self.process()

    # replies

    def flush(self) -> None:
        """Send every reply at the head of the queue that is computed and durable."""
        transport = self.transport
        if transport is None:
            return
        server = self._server
        synced = server.group_commit.synced
        replies = self.replies
        out = []
        while replies:
            head = replies[0]
            if head.data is None or head.ticket > synced:
                break
            out.append(head.data)
            replies.popleft()
        if out:
            transport.write(b"".join(out))
        if replies:
            server.waiting.add(self)
        else:
            if out:
                server.group_commit.answered(self)
            server.waiting.discard(self)
            if self.draining:
                transport.close()

    def abort(self, reason: str) -> None:
        log.info("closing a Thrift connection: %s", reason)
        if self.transport is not None:
            self.transport.abort()
