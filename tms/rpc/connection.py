"""One client connection of the binary protocol's server.

* The first request must be ``HELLO``: the protocol version and, when the service
  authenticates, the bearer token. Anything else first, an unsupported version or a
  token that is not valid is answered and the connection closed.
* Frames are cut from the byte stream (``tms.rpc.frames.read_frames``) and each request
  goes to its ``Backend`` handler at once; responses leave as soon as they are ready, in
  any order (a long poll does not hold back the publishes behind it). Responses that
  become ready in one turn of the loop leave in one write.
* Plain publishes (``frames.plain_publish``: no write pointer, no TTLs, no trace) to a
  topic the connection published to before, next to each other in one read and with one
  timeout, are read without decoding their bodies in full and go to the backend as one
  publish of all their payloads (``Backend.publish_plain`` with ``requests``), in order:
  one call, one ticket and one answer for the run, whose response frames are built in
  one pass. Each request is still answered (and counted) on its own; they succeed or
  fail together, as they would in one synced batch.
* Back-pressure: with ``max_in_flight`` requests in progress the connection is not read
  further (the client's sends block in TCP) until one is answered; nor while the client
  does not read its responses.
* A request that waited in the server past its timeout is dropped unprocessed and
  answered ``request_timeout``. Its waiting counts from when its last bytes were read
  from the socket (frames held back by back-pressure are stamped when read, so their
  wait is never overstated).
* A frame that cannot be read (length out of range, unknown kind, a response or GOAWAY
  sent by the client) ends this connection only: GOAWAY ``bad_frame``, then the close.
  A request whose body does not decode, or names a bad topic, or that the caller may
  not make, gets its error response and the connection goes on.
* A close by the server *lingers*: GOAWAY is sent, the sending side shut, and what the
  client still sends is read and dropped for up to ``LINGER_S`` (closing at once while
  the client is sending would make the kernel reset the connection, which can destroy
  the GOAWAY before the client reads it).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from tms.errors import (
    NotOwnerError,
    TmsError,
    TmsInvalidArgumentError,
    UnsupportedOperationError,
)
from tms.http.auth import Permission
from tms.model import TopicId
from tms.rpc.frames import (
    FLAG_ERROR,
    HEADER,
    MIN_LENGTH,
    PROTOCOL_VERSION,
    Frame,
    FrameError,
    Kind,
    decode_body,
    encode_body,
    encode_error,
    encode_frame,
    plain_publish,
    read_frames,
    rpc,
)
from tms.rpc.ops import BY_CODE, HELLO, PUBLISH, Op

if TYPE_CHECKING:
    from tms.rpc.server import RpcServer

__all__ = ["LINGER_S", "Connection"]

log = logging.getLogger(__name__)

LINGER_S = 2.0
_REQUEST = int(Kind.REQUEST)
_RESPONSE = int(Kind.RESPONSE)
_PING = int(Kind.PING)
_PONG = int(Kind.PONG)
_GOAWAY = int(Kind.GOAWAY)
_pack = HEADER.pack
_PUBLISH = PUBLISH.code


def _error_body(error: BaseException) -> bytes:
    """The ``Error`` body answering ``error`` (anything but a ``TmsError``: internal)."""
    if isinstance(error, NotOwnerError):
        return encode_error(error.code, str(error), error.owner_rpc)
    if isinstance(error, TmsError):
        return encode_error(error.code, str(error))
    return encode_error("internal_error", f"internal error: {error!r}")


class _Publishes:
    """A run of plain publishes of one read to one known topic, with one deadline."""

    __slots__ = ("deadline", "ids", "payloads", "topic")

    def __init__(self, topic: TopicId, deadline: float | None) -> None:
        self.topic = topic
        self.deadline = deadline
        self.ids: list[int] = []
        self.payloads: list[bytes] = []


class Connection(asyncio.Protocol):
    def __init__(self, server: RpcServer) -> None:
        self._server = server
        self._config = server.config
        self._backend = server.backend
        self._now = server.monotonic
        self._buf: bytes | bytearray = b""
        """Bytes read and not yet cut into frames (a bytearray once a frame spans reads
        beyond a few KiB, so that adding to it does not copy it)."""
        self.transport: asyncio.Transport | None = None
        self.accepted = self.last_rx = self._now()
        self.partial_since: float | None = None
        """When the unfinished frame at the head of the buffer began (None: none)."""
        self.in_flight = 0
        self.welcomed = False
        self.closing = False
        self.principal: str | None = None
        self._allowed: set[tuple[TopicId, Permission]] = set()
        self._topics: dict[tuple[object, object], TopicId] = {}
        self._plain_topics: dict[bytes, TopicId] = {}
        """The topics of plain publishes by the bytes of their names' fields
        (``plain_publish``): known valid and allowed."""
        self._outbox: list[bytes] = []
        self._pauses: set[str] = set()
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.closing = True
        self._server.connections.discard(self)
        if self._linger is not None:
            self._linger.cancel()
        self._buf = b""
        self._outbox.clear()

    def pause_writing(self) -> None:
        self.pause("writing")

    def resume_writing(self) -> None:
        self.resume("writing")

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return  # lingering: read and drop
        buf = self._buf
        if not buf:
            self._buf = data  # frames are cut from it without copying it first
        elif type(buf) is bytes:  # what was left of a read, and the rest of its frame
            self._buf = buf + data if len(buf) < 4096 else bytearray(buf) + data
        else:
            buf += data
        self.last_rx = self._now()
        self._process()

    def eof_received(self) -> bool | None:
        return None  # the client closed its side: close ours (in-flight answers are lost)

    # -- reading --------------------------------------------------------------------------

    def pause(self, reason: str) -> None:
        if not self._pauses and self.transport is not None:
            self.transport.pause_reading()
        self._pauses.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self._pauses:
            return
        self._pauses.discard(reason)
        if not self._pauses and self.transport is not None and not self.closing:
            self.transport.resume_reading()
            if self._buf:
                self._process()  # frames held back while paused

    def _process(self) -> None:
        config = self._config
        room = config.max_in_flight - self.in_flight
        try:
            frames, used = read_frames(self._buf, config.max_frame_bytes, max(room, 0))
        except FrameError as exc:
            self.goaway("bad_frame", str(exc))
            return
        if used:
            buf = self._buf
            if isinstance(buf, bytearray):
                del buf[:used]
            else:
                self._buf = buf[used:]
        received = self.last_rx
        run: _Publishes | None = None
        for frame in frames:
            if self.closing:
                break
            kind = frame.kind
            plain, read = None, False
            if kind == _REQUEST and frame.op == _PUBLISH and self.welcomed and not frame.flags:
                plain, read = plain_publish(frame.body), True
                topic = self._plain_topics.get(plain[0]) if plain is not None else None
                if plain is not None and topic is not None:  # known valid and allowed
                    timeout_ms = frame.timeout_ms
                    deadline = received + timeout_ms / 1000 if timeout_ms else None
                    if run is None or run.topic is not topic or run.deadline != deadline:
                        if run is not None:
                            self._publish_run(run)
                        run = _Publishes(topic, deadline)
                    run.ids.append(frame.request_id)
                    run.payloads += plain[1]
                    continue
            if run is not None:  # the requests of a read are dispatched in their order
                self._publish_run(run)
                run = None
            if kind == _REQUEST:
                self._request(frame, received, plain, read=read)
            elif kind == _PING:
                self._send(encode_frame(_PONG, 0, frame.request_id))
            elif kind != _PONG:
                self.goaway("bad_frame", f"a client does not send frames of kind {kind}")
                break
        if run is not None:
            self._publish_run(run)
        if self.closing:
            return
        if self.in_flight >= config.max_in_flight:
            self.pause("in_flight")
            self.partial_since = None
        elif self._buf:
            if self.partial_since is None:
                self.partial_since = received
        else:
            self.partial_since = None

    # -- requests -------------------------------------------------------------------------

    def _publish_run(self, run: _Publishes) -> None:
        ids = run.ids
        self.in_flight += len(ids)
        done = partial(self._done_run, ids)
        try:
            self._backend.publish_plain(
                run.topic, run.payloads, run.deadline, done, requests=len(ids)
            )
        except Exception as exc:  # answered: a TmsError as itself, anything else as internal
            done(exc)

    def _request(
        self,
        frame: Frame,
        received: float,
        plain: tuple[bytes, list[bytes]] | None = None,
        *,
        read: bool = False,
    ) -> None:
        """``read``: the caller read the body with ``plain_publish`` already (``plain``)."""
        request_id = frame.request_id
        op = BY_CODE.get(frame.op)
        if not self.welcomed:
            if op is not HELLO:
                self.goaway("handshake_required", "the first request must be hello (op 0)")
            else:
                self._hello(frame)
            return
        if op is None:
            error = UnsupportedOperationError(f"unknown operation {frame.op}")
            self._send_error(frame.op, request_id, error)
            return
        self.in_flight += 1
        done = partial(self._done, op, request_id, frame.trace)
        try:
            if op is HELLO:
                raise TmsInvalidArgumentError("hello was already said on this connection")
            deadline = received + frame.timeout_ms / 1000 if frame.timeout_ms else None
            if not read and op is PUBLISH:
                plain = plain_publish(frame.body)
            if plain is not None:
                topic = self._plain_topics.get(plain[0])
                if topic is not None:  # a topic this connection published to before
                    self._backend.publish_plain(topic, plain[1], deadline, done)
                    return
            req = decode_body(op.request, frame.body)
            topic = self._topic(req)
            assert op.permission is not None
            if self._server.authorizer is not None:
                self._authorize(topic, op.permission)
            if plain is not None and len(self._plain_topics) < 1024:  # allowed, names valid
                self._plain_topics[plain[0]] = topic
            self._backend.dispatch(op, req, topic, deadline, done)
        except Exception as exc:  # answered: a TmsError as itself, anything else as internal
            done(exc)

    def _topic(self, req: Any) -> TopicId:
        key = (req.ns, req.topic)
        topic = self._topics.get(key)
        if topic is None:
            topic = TopicId(req.ns, req.topic)  # validates both names
            if len(self._topics) < 1024:
                self._topics[key] = topic
        return topic

    def _authorize(self, topic: TopicId, permission: Permission) -> None:
        key = (topic, permission)
        if key not in self._allowed:  # grants do not change while the server runs
            authorizer = self._server.authorizer
            assert authorizer is not None and self.principal is not None
            authorizer.check(self.principal, topic.namespace, topic.topic, permission)
            if len(self._allowed) < 4096:
                self._allowed.add(key)

    def _hello(self, frame: Frame) -> None:
        rid = frame.request_id
        try:
            hello = decode_body(rpc.Hello, frame.body)
            if hello.version != PROTOCOL_VERSION:
                raise TmsInvalidArgumentError(
                    f"protocol version {hello.version} is not supported "
                    f"(this server speaks {PROTOCOL_VERSION})"
                )
            authorizer = self._server.authorizer
            if authorizer is not None:
                token = hello.token if isinstance(hello.token, str) else ""
                self.principal = authorizer.authenticate(f"Bearer {token}" if token else None)
        except TmsError as exc:
            self._send_error(HELLO.code, rid, exc)
            self.goaway(exc.code, str(exc))
            return
        self.welcomed = True
        server = self._server
        welcome = rpc.Welcome(
            version=PROTOCOL_VERSION,
            max_frame_bytes=self._config.max_frame_bytes,
            max_in_flight=self._config.max_in_flight,
            idle_timeout_ms=int(self._config.idle_timeout_s * 1000),
            http_port=server.http_port,
            http_tls=server.http_tls,
            principal=self.principal,
        )
        self._send(encode_frame(_RESPONSE, HELLO.code, rid, encode_body(welcome)))

    def _done(self, op: Op, request_id: int, trace: Any, result: Any) -> None:
        """A request's outcome (on the loop): its response goes out."""
        self.in_flight -= 1
        if self.transport is None or self._linger is not None:
            return  # the client is gone, or the connection is closing
        if isinstance(result, BaseException):
            if not isinstance(result, TmsError):
                log.error(
                    "%s (request %d, trace %s) failed", op.name, request_id, trace, exc_info=result
                )
            self._send_error(op.code, request_id, result)
        else:
            body = result if type(result) is bytes else encode_body(result)
            # encode_frame's, for the commonest frame: no flags, no trace
            self._send(_pack(MIN_LENGTH + len(body), _RESPONSE, op.code, 0, request_id, 0) + body)
        if "in_flight" in self._pauses:
            self.resume("in_flight")

    def _done_run(self, request_ids: list[int], result: Any) -> None:
        """The outcome of a run of plain publishes (``_publish_run``): each of its
        requests is answered with it, their frames built in one pass."""
        self.in_flight -= len(request_ids)
        if self.transport is None or self._linger is not None:
            return
        if isinstance(result, BaseException):
            if not isinstance(result, TmsError):
                log.error(
                    "publish (requests %d-%d) failed",
                    request_ids[0],
                    request_ids[-1],
                    exc_info=result,
                )
            body, flags = _error_body(result), FLAG_ERROR
        else:
            body = result if type(result) is bytes else encode_body(result)
            flags = 0
        size = MIN_LENGTH + len(body)
        self._send(
            b"".join(
                [_pack(size, _RESPONSE, _PUBLISH, flags, rid, 0) + body for rid in request_ids]
            )
        )
        if "in_flight" in self._pauses:
            self.resume("in_flight")

    # -- writing --------------------------------------------------------------------------

    def _send_error(self, op: int, request_id: int, error: BaseException) -> None:
        body = _error_body(error)
        self._send(encode_frame(_RESPONSE, op, request_id, body, flags=FLAG_ERROR))

    def _send(self, frame: bytes) -> None:
        if not self._outbox:
            self._server.loop.call_soon(self._flush)
        self._outbox.append(frame)

    def _flush(self) -> None:
        if self._outbox and self.transport is not None:
            data = b"".join(self._outbox) if len(self._outbox) > 1 else self._outbox[0]
            self._outbox.clear()
            self.transport.write(data)

    # -- closing --------------------------------------------------------------------------

    def goaway(self, code: str, message: str) -> None:
        """Tell the client why, stop serving it and close (lingering)."""
        if self.closing or self.transport is None:
            return
        self.closing = True
        if code not in ("idle_timeout", "shutting_down"):
            log.info("closing a connection: %s: %s", code, message)
        self._flush()
        goaway = encode_frame(_GOAWAY, 0, 0, encode_error(code, message), flags=FLAG_ERROR)
        self.transport.write(goaway)
        self.transport.resume_reading()  # read and drop what the client still sends
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self._linger = self._server.loop.call_later(LINGER_S, self.abort)
        else:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.close()
