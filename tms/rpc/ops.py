"""Every operation of the binary protocol: the one table both sides read.

An operation is its code (the frame header's ``op`` byte), the structs of its request
and response bodies (``txms_rpc.thrift``), the permission a caller needs on the topic
named in the request (``tms.http.auth``, as for the REST routes), the name of the
``tms.rpc.backend.Backend`` method that answers it, and whether a client may send it
again after a lost answer. Adding an operation is one entry here, its structs in the
IDL and its ``Backend`` method (docs/rpc.md, "Adding an operation").

``HELLO`` (0) opens every connection; the server answers it itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tms.http.auth import Permission
from tms.rpc.frames import rpc

__all__ = ["BY_CODE", "BY_NAME", "HELLO", "OPS", "Op"]


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
    handler: str
    """The ``Backend`` method that answers it."""
    idempotent: bool
    """Sending it twice has the effect of sending it once: a client may retry it."""

    def __post_init__(self) -> None:
        if not 0 <= self.code <= 255:
            raise ValueError(f"{self.name}: an op code is one byte")


HELLO = Op(0, "hello", rpc.Hello, rpc.Welcome, None, "hello", True)
_W, _R = Permission.WRITE, Permission.READ

OPS: tuple[Op, ...] = (
    # code, name, request body, response body, permission, Backend method, idempotent
    HELLO,
    Op(1, "publish", rpc.PublishRequest, rpc.PublishResponse, _W, "publish", False),
    Op(2, "store", rpc.PublishRequest, rpc.Empty, _W, "store", False),
    Op(3, "rollback", rpc.RollbackRequest, rpc.RollbackResponse, _W, "rollback", True),
    Op(4, "markers", rpc.MarkersRequest, rpc.MarkersResponse, _W, "markers", True),
    Op(5, "poll", rpc.PollRequest, rpc.PollResponse, _R, "poll", True),
    Op(6, "bounds", rpc.PollRequest, rpc.BoundsResponse, _R, "bounds", True),
)

BY_CODE: dict[int, Op] = {op.code: op for op in OPS}
BY_NAME: dict[str, Op] = {op.name: op for op in OPS}
if len(BY_CODE) != len(OPS) or len(BY_NAME) != len(OPS):
    raise ValueError("op codes and names must be unique")
