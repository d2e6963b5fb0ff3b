"""Every operation of the binary protocol: the one table both sides read.

An operation is its code (the frame header's ``op`` byte), the structs of its request
and response bodies (``txms_rpc.thrift``), the permission a caller needs on the topic
named in the request (``tms.http.auth``, as for the REST routes), whether a client may
send it again after a lost answer, and what the server does with it: a write names the
typed operation (``tms.operations``) a request asks for and the answer to its result
(``tms.rpc.writes``), which the server submits to the topic's group commit; a read names
the ``tms.rpc.backend.Backend`` method that answers it. Adding an operation is one entry
here, its structs in the IDL, and its pair in ``tms.rpc.writes`` or its ``Backend``
method (docs/rpc.md, "Adding an operation").

``HELLO`` (0) opens every connection; the server answers it itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tms.http.auth import Permission
from tms.model import TopicId
from tms.operations import Operation
from tms.rpc import writes
from tms.rpc.frames import rpc

__all__ = ["BY_CODE", "BY_NAME", "HELLO", "OPS", "PUBLISH", "Op"]


@dataclass(frozen=True, slots=True)
class Op:
    code: int
    name: str
    request: Any
    """The struct class of the request body."""
    response: Any
    """The struct class of a successful response body."""
    permission: Permission | None
    """Needed on the request's topic; None only for HELLO."""
    idempotent: bool
    """Sending it twice has the effect of sending it once: a client may retry it."""
    handler: str = ""
    """A read: the ``Backend`` method that answers it."""
    write: Callable[[Any, TopicId], Operation[Any]] | None = None
    """A write: the typed operation a request asks for (``TmsInvalidArgumentError`` for
    one that makes no sense)."""
    answer: Callable[[Any], Any] | None = None
    """A write: the response (a struct, or its encoded body) to the operation's result."""

    def __post_init__(self) -> None:
        if not 0 <= self.code <= 255:
            raise ValueError(f"{self.name}: an op code is one byte")
        is_write = self.write is not None
        if is_write != (self.answer is not None) or is_write == bool(self.handler):
            raise ValueError(f"{self.name}: a write (write and answer) or a read (handler)")


HELLO = Op(0, "hello", rpc.Hello, rpc.Welcome, None, True, handler="hello")
_W, _R = Permission.WRITE, Permission.READ

OPS: tuple[Op, ...] = (
    # code, name, request body, response body, permission, idempotent, what it does
    HELLO,
    Op(1, "publish", rpc.PublishRequest, rpc.PublishResponse, _W, False,
       write=writes.publish, answer=writes.publish_answer),
    Op(2, "store", rpc.PublishRequest, rpc.Empty, _W, False,
       write=writes.store, answer=writes.store_answer),
    Op(3, "rollback", rpc.RollbackRequest, rpc.RollbackResponse, _W, True,
       write=writes.rollback, answer=writes.rollback_answer),
    Op(4, "markers", rpc.MarkersRequest, rpc.MarkersResponse, _W, True,
       write=writes.markers, answer=writes.markers_answer),
    Op(5, "poll", rpc.PollRequest, rpc.PollResponse, _R, True, handler="poll"),
    Op(6, "bounds", rpc.PollRequest, rpc.BoundsResponse, _R, True, handler="bounds"),
    # Queues (docs/queues.md): a lost receive's leases run out; a repeated ack answers acked
    Op(7, "receive", rpc.ReceiveRequest, rpc.ReceiveResponse, _R, True, handler="receive"),
    Op(8, "ack", rpc.AckRequest, rpc.AckResponse, _R, True,
       write=writes.ack, answer=writes.outcomes_answer),
    # subscriptions (tms.rpc.subs): their administration stays on REST
    Op(9, "sub_poll", rpc.SubPollRequest, rpc.SubPollResponse, _R, True, handler="sub_poll"),
    Op(10, "sub_commit", rpc.SubCommitRequest, rpc.SubscriptionState, _R, False,
       handler="sub_commit"),
    Op(11, "sub_position", rpc.SubCommitRequest, rpc.PositionWritten, _R, False,
       handler="sub_position"),
    # Queues, continued: an enqueue may be resent only when every message has a key (the
    # client decides); a nack twice would count a failed attempt twice
    Op(12, "enqueue", rpc.EnqueueRequest, rpc.EnqueueResponse, _W, False,
       write=writes.enqueue, answer=writes.enqueue_answer),
    Op(13, "nack", rpc.NackRequest, rpc.AckResponse, _R, False,
       write=writes.nack, answer=writes.outcomes_answer),
    Op(14, "settle", rpc.SettleRequest, rpc.SettleResponse, _W, True,
       write=writes.settle, answer=writes.settle_answer),
)  # fmt: skip

BY_CODE: dict[int, Op] = {op.code: op for op in OPS}
PUBLISH = BY_CODE[1]
BY_NAME: dict[str, Op] = {op.name: op for op in OPS}
if len(BY_CODE) != len(OPS) or len(BY_NAME) != len(OPS):
    raise ValueError("op codes and names must be unique")
