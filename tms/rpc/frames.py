"""Frames of txms's binary protocol (docs/rpc.md): pure codecs, no I/O.

Every frame is a 4-byte length and a 12-byte header, big-endian, then the body::

    offset  size  field
    0       4     length      bytes after this field (header + trace + body), >= 12
    4       1     kind        1 REQUEST, 2 RESPONSE, 3 PING, 4 PONG, 5 GOAWAY
    5       1     op          the operation (``tms.rpc.ops``); 0 for PING/PONG/GOAWAY
    6       2     flags       0x0001 TRACED (request: 16 trace bytes follow the header)
                              0x0002 ERROR (response, GOAWAY: the body is an ``Error``)
    8       4     request id  chosen by the client; its response carries it back
    12      4     timeout ms  REQUEST: the longest it may wait in the server's queues
                              (0 = no limit); 0 in every other kind
    16      16    trace       TRACED only: trace id, span id (u64 each)
    ...           body        a struct of ``txms_rpc.thrift`` in Thrift's binary protocol

Bodies go through thriftpy2's C codec (``encode_body`` / ``decode_body``). Decoding reads
through a buffered transport that raises on a short read: thriftpy2's memory buffer
would read zeros past the end, and a list claiming a billion items would allocate them.
``plain_publish`` reads the commonest body, a ``PublishRequest`` of payloads only, in a
few slices (about half of ``decode_body``'s time, and no struct object), and
``plain_publish_body`` writes it without a struct (the same bytes as ``encode_body``).
"""

from __future__ import annotations

import enum
import struct
from pathlib import Path
from typing import Any, NamedTuple

import thriftpy2
from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
from thriftpy2.transport.memory import TCyMemoryBuffer  # type: ignore[attr-defined]

from tms.errors import TmsCodecError
from txn.rpc.wire import reading

__all__ = [
    "FLAG_ERROR",
    "FLAG_TRACED",
    "HEADER",
    "HEADER_SIZE",
    "IDL_PATH",
    "MIN_LENGTH",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameError",
    "Kind",
    "decode_body",
    "encode_body",
    "encode_error",
    "encode_frame",
    "plain_names",
    "plain_publish",
    "plain_publish_body",
    "read_frames",
    "rpc",
]

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">IBBHII")
"""length, kind, op, flags, request id, timeout ms."""
HEADER_SIZE = HEADER.size  # 16
MIN_LENGTH = HEADER_SIZE - 4
_TRACE = struct.Struct(">QQ")
FLAG_TRACED = 0x0001
FLAG_ERROR = 0x0002

IDL_PATH = Path(__file__).with_name("txms_rpc.thrift")
rpc: Any = thriftpy2.load(str(IDL_PATH), module_name="txms_rpc_thrift")
"""The structs of the bodies: ``rpc.PublishRequest``, ``rpc.PollResponse``, ..."""


class Kind(enum.IntEnum):
    REQUEST = 1
    RESPONSE = 2
    PING = 3
    PONG = 4
    GOAWAY = 5


_KINDS = frozenset(int(k) for k in Kind)


class FrameError(Exception):
    """Bytes that are not a frame: the connection cannot be read any further."""


class Frame(NamedTuple):
    """One decoded frame; ``body`` still encoded."""

    kind: int
    op: int
    flags: int
    request_id: int
    timeout_ms: int
    trace: tuple[int, int] | None
    body: bytes


def encode_frame(
    kind: int,
    op: int,
    request_id: int,
    body: bytes = b"",
    *,
    flags: int = 0,
    timeout_ms: int = 0,
    trace: tuple[int, int] | None = None,
) -> bytes:
    """One whole frame (length prefix included)."""
    if trace is not None:
        flags |= FLAG_TRACED
        head = HEADER.pack(MIN_LENGTH + 16 + len(body), kind, op, flags, request_id, timeout_ms)
        return head + _TRACE.pack(*trace) + body
    flags &= ~FLAG_TRACED
    return HEADER.pack(MIN_LENGTH + len(body), kind, op, flags, request_id, timeout_ms) + body


def read_frames(
    data: bytes | bytearray, max_frame_bytes: int, limit: int = 2**31
) -> tuple[list[Frame], int]:
    """The whole frames at the start of ``data`` (at most ``limit``) and how many bytes
    they took; what is left begins with the next frame. ``FrameError`` for a length out
    of range, an unknown kind, or a traced frame too short for its trace."""
    frames: list[Frame] = []
    pos, end = 0, len(data)
    unpack = HEADER.unpack_from
    while end - pos >= HEADER_SIZE and len(frames) < limit:
        length, kind, op, flags, request_id, timeout_ms = unpack(data, pos)
        if not MIN_LENGTH <= length <= max_frame_bytes:
            raise FrameError(f"bad frame length {length}")
        if kind not in _KINDS:
            raise FrameError(f"unknown frame kind {kind}")
        stop = pos + 4 + length
        if stop > end:
            break
        start = pos + HEADER_SIZE
        trace = None
        if flags & FLAG_TRACED:
            if length < MIN_LENGTH + 16:
                raise FrameError("a traced frame without its trace")
            trace = _TRACE.unpack_from(data, start)
            start += 16
        frames.append(
            Frame(kind, op, flags, request_id, timeout_ms, trace, bytes(data[start:stop]))
        )
        pos = stop
    if end - pos >= 4 and len(frames) < limit:  # an unfinished frame's length: check it now
        length = int.from_bytes(data[pos : pos + 4], "big")
        if not MIN_LENGTH <= length <= max_frame_bytes:
            raise FrameError(f"bad frame length {length}")
    return frames, pos


def encode_body(struct_: Any) -> bytes:
    buf = TCyMemoryBuffer()
    TCyBinaryProtocol(buf).write_struct(struct_)
    data: bytes = buf.getvalue()
    return data


def decode_body(cls: Any, data: bytes) -> Any:
    """``data`` read into a new ``cls``; ``TmsCodecError`` if it does not decode."""
    result = cls()
    try:
        reading(data).read_struct(result)
    except Exception as exc:  # thriftpy2 raises several unrelated types on bad input
        raise TmsCodecError(f"malformed {cls.__name__}: {exc}") from exc
    return result


_NS = b"\x0b\x00\x01"  # field 1, a string
_TOPIC = b"\x0b\x00\x02"  # field 2, a string
_PAYLOADS = b"\x0f\x00\x04\x0b"  # field 4, a list of binaries
_U32 = struct.Struct(">I")
_FIELD = struct.Struct(">3sI")  # a field's type and id, and a string's length
_LIST = struct.Struct(">4sII")  # a list field's type, id and item type; its size; the first length


def plain_publish(body: bytes) -> tuple[bytes, list[bytes]] | None:
    """A ``PublishRequest`` body of exactly the fields ns, topic and payloads (at least
    one), in that order — what the clients send for a publish that is not transactional
    and has no TTLs — as (the bytes of its ns and topic fields, the payloads). None for
    any other body, valid or not: ``decode_body`` reads those (and says what is wrong).
    The names are not decoded here: the caller knows them by their bytes, or decodes
    the body in full."""
    try:
        tag, n = _FIELD.unpack_from(body, 0)
        if tag != _NS:
            return None
        pos = 7 + n
        tag, n = _FIELD.unpack_from(body, pos)
        if tag != _TOPIC:
            return None
        names_end = pos + 7 + n
        tag, count, n = _LIST.unpack_from(body, names_end)
    except struct.error:  # shorter than its fields say
        return None
    end = len(body) - 1  # the struct's stop byte
    if tag != _PAYLOADS or not 0 < count <= (end - names_end) >> 2:
        return None
    start = names_end + 12
    pos = start + n
    payloads = [body[start:pos]]
    for _ in range(count - 1):
        if pos + 4 > end:
            return None
        start = pos + 4
        pos = start + _U32.unpack_from(body, pos)[0]
        payloads.append(body[start:pos])
    if pos != end or body[end] != 0:
        return None
    return body[:names_end], payloads


def plain_names(ns: str, topic: str) -> bytes:
    """The ns and topic fields of a ``PublishRequest`` (what ``plain_publish`` returns
    first), for ``plain_publish_body``."""
    ns_bytes, topic_bytes = ns.encode(), topic.encode()
    return (
        _NS + _U32.pack(len(ns_bytes)) + ns_bytes + _TOPIC + _U32.pack(len(topic_bytes))
        + topic_bytes
    )  # fmt: skip


def plain_publish_body(names: bytes, payloads: list[bytes]) -> bytes:
    """``encode_body`` of the ``PublishRequest`` of ``names`` (``plain_names``) and
    ``payloads`` (at least one) alone, built from its bytes: the body ``plain_publish``
    reads."""
    first = payloads[0]
    parts = [names, _LIST.pack(_PAYLOADS, len(payloads), len(first)), first]
    for payload in payloads[1:]:
        parts += (_U32.pack(len(payload)), payload)
    parts.append(b"\x00")
    return b"".join(parts)


def encode_error(code: str, message: str, owner: str | None = None) -> bytes:
    """An ``Error`` body; ``owner``: a ``not_owner`` error's owner address."""
    return encode_body(rpc.Error(code=code, message=message, owner=owner or None))
