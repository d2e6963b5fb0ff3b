"""Thrift messages on the wire (framed transport, binary protocol); pure, no I/O.

* ``encode_message``: any reply, through thriftpy2's generic encoder.
* ``encode_call`` / ``decode_reply``: any call and its answer, the generic way (what
  thriftpy2's client does, on bytes).
* Hand-written codecs for the calls of a transaction's life (start, canCommit, commit),
  which are nearly all the traffic. Server side: ``parse_call`` reads a message header,
  the ``*_args`` functions read the argument layouts every Thrift compiler writes for
  them, ``void_reply`` / ``transaction_reply`` write their successful answers. Client
  side: ``call_frame`` with the ``encode_*_args`` functions writes those calls,
  ``result_offset`` / ``is_void_success`` / ``transaction_result`` read the successful
  answers. They skip the generic machinery (a protocol object, an argument object, a
  result object per call).

Contract of the decoders (both sides): they return None for anything but the exact standard layout
(fields in id order, no extra or missing field, STOP last, valid UTF-8) and never raise;
the caller then decodes the message the generic way, which accepts every valid encoding
and rejects invalid ones. So these codecs change speed, never meaning. The reply bytes
are the generic encoder's (tested byte for byte).
"""

from __future__ import annotations

import struct
from typing import Any

from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport.buffered import TCyBufferedTransport  # type: ignore[attr-defined]
from thriftpy2.transport.memory import TCyMemoryBuffer  # type: ignore[attr-defined]

from txn.codec import decode_transaction, encode_transaction
from txn.errors import CodecError
from txn.transaction import Transaction

__all__ = [
    "Call",
    "FrameReader",
    "call_frame",
    "can_commit_args",
    "client_id_args",
    "client_id_timeout_args",
    "commit_args",
    "decode_reply",
    "encode_call",
    "encode_can_commit_args",
    "encode_client_id_args",
    "encode_client_id_timeout_args",
    "encode_commit_args",
    "encode_message",
    "is_void_success",
    "no_args",
    "parse_call",
    "reply_head",
    "result_offset",
    "timeout_args",
    "transaction_reply",
    "transaction_result",
    "void_reply",
]

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">3xq3xq")  # two i64 fields, skipping each field header

# Field headers: type byte + field id.
_STRING_1 = b"\x0b\x00\x01"
_I32_1 = b"\x08\x00\x01"
_I32_2 = b"\x08\x00\x02"
_I64_1 = b"\x0a\x00\x01"
_I64_2 = b"\x0a\x00\x02"
_BINARY_SET_2 = b"\x0e\x00\x02\x0b"  # set<binary>, field 2, element type string
_STOP = 0

Call = tuple[bytes, bytes, int]
"""A call's method name, its 4 seqid bytes, and where its argument struct starts."""


class FrameReader:
    """One frame as a thriftpy2 transport. Read it through ``TCyBufferedTransport``, which
    raises on a short read (thriftpy2's memory buffer would silently read zeros)."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def read(self, n: int) -> bytes:
        chunk = self.data[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk


def reading(body: bytes) -> Any:
    """A thriftpy2 protocol reading the frame body ``body``."""
    return TCyBinaryProtocol(TCyBufferedTransport(FrameReader(body)), strict_read=False)


def encode_call(api: str, args: Any, seqid: int = 0) -> bytes:
    """A framed ``CALL`` of ``api`` with the argument struct ``args``."""
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(api, TMessageType.CALL, seqid)
    proto.write_struct(args)
    buf.flush()
    body: bytes = buf.getvalue()
    return len(body).to_bytes(4, "big") + body


def decode_reply(body: bytes, api: str, result: Any) -> Any:
    """The answer in a reply frame's ``body`` to a call of ``api``, read into the empty
    result struct ``result``: its success value (None for void), or raises the declared
    exception it carries, or the ``TApplicationException`` the server sent (also
    ``MISSING_RESULT`` when a non-void answer carries nothing). Undecodable bytes raise
    thriftpy2's protocol/transport errors."""
    proto = reading(body)
    _name, mtype, _seqid = proto.read_message_begin()
    if mtype == TMessageType.EXCEPTION:
        error = TApplicationException()
        proto.read_struct(error)
        raise error
    if mtype != TMessageType.REPLY:
        raise TApplicationException(
            TApplicationException.INVALID_MESSAGE_TYPE, f"{api}: message type {mtype}"
        )
    proto.read_struct(result)
    for field_id, spec in result.thrift_spec.items():
        value = getattr(result, spec[1])
        if field_id != 0 and value is not None:
            raise value
    success = getattr(result, "success", None)
    if success is None and 0 in result.thrift_spec:
        raise TApplicationException(TApplicationException.MISSING_RESULT, f"{api}: no result")
    return success


def encode_message(api: str, seqid: int, result: Any) -> bytes:
    """A framed reply: ``REPLY`` with the result struct, or ``EXCEPTION``."""
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    if isinstance(result, TApplicationException):
        proto.write_message_begin(api, TMessageType.EXCEPTION, seqid)
    else:
        proto.write_message_begin(api, TMessageType.REPLY, seqid)
    proto.write_struct(result)
    buf.flush()
    body: bytes = buf.getvalue()
    return len(body).to_bytes(4, "big") + body


def parse_call(frame: bytes) -> Call | None:
    """The header of a ``CALL`` with a strict (versioned) header; None for anything else
    (oneway, old-style header, short frame)."""
    if len(frame) < 12 or frame[0] != 0x80 or frame[1] != 0x01 or frame[2] != 0:
        return None
    if frame[3] != TMessageType.CALL:
        return None
    end = 8 + int.from_bytes(frame[4:8], "big")
    if end + 4 > len(frame):
        return None
    return frame[8:end], frame[end : end + 4], end + 4


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def no_args(frame: bytes, pos: int) -> bool:
    """An empty argument struct."""
    return len(frame) == pos + 1 and frame[pos] == _STOP


def timeout_args(frame: bytes, pos: int) -> int | None:
    """``(1: i32 timeout)``."""
    if len(frame) != pos + 8 or frame[pos : pos + 3] != _I32_1 or frame[pos + 7] != _STOP:
        return None
    return int(_I32.unpack_from(frame, pos + 3)[0])


def _string_1(frame: bytes, pos: int) -> tuple[str, int] | None:
    """Field 1 as a string; the value and the position after it."""
    if frame[pos : pos + 3] != _STRING_1 or len(frame) < pos + 7:
        return None
    start = pos + 7
    end = start + _I32.unpack_from(frame, pos + 3)[0]
    if end < start or end > len(frame):
        return None
    value = _utf8(frame[start:end])
    return None if value is None else (value, end)


def client_id_args(frame: bytes, pos: int) -> str | None:
    """``(1: string clientId)``."""
    field = _string_1(frame, pos)
    if field is None or len(frame) != field[1] + 1 or frame[field[1]] != _STOP:
        return None
    return field[0]


def client_id_timeout_args(frame: bytes, pos: int) -> tuple[str, int] | None:
    """``(1: string clientId, 2: i32 timeout)``."""
    field = _string_1(frame, pos)
    if field is None:
        return None
    client_id, p = field
    if len(frame) != p + 8 or frame[p : p + 3] != _I32_2 or frame[p + 7] != _STOP:
        return None
    return client_id, int(_I32.unpack_from(frame, p + 3)[0])


def can_commit_args(frame: bytes, pos: int) -> tuple[int, list[bytes]] | None:
    """``(1: i64 tx, 2: set<binary> changes)``."""
    limit = len(frame)
    if (
        limit < pos + 20
        or frame[pos : pos + 3] != _I64_1
        or frame[pos + 11 : pos + 15] != _BINARY_SET_2
    ):
        return None
    tx = int(_I64.unpack_from(frame, pos + 3)[0])
    count = _I32.unpack_from(frame, pos + 15)[0]
    p = pos + 19
    if count < 0 or count > (limit - p) // 4:
        return None
    changes = []
    for _ in range(count):
        if p + 4 > limit:
            return None
        start = p + 4
        p = start + _I32.unpack_from(frame, p)[0]
        if p < start or p > limit:
            return None
        changes.append(frame[start:p])
    if p + 1 != limit or frame[p] != _STOP:
        return None
    return tx, changes


def commit_args(frame: bytes, pos: int) -> tuple[int, int] | None:
    """``(1: i64 txId, 2: i64 wp)``."""
    if (
        len(frame) != pos + 23
        or frame[pos : pos + 3] != _I64_1
        or frame[pos + 11 : pos + 14] != _I64_2
        or frame[pos + 22] != _STOP
    ):
        return None
    tx_id, wp = _I64_I64.unpack_from(frame, pos)
    return int(tx_id), int(wp)


def reply_head(name: bytes) -> bytes:
    """A ``REPLY`` header for method ``name``, up to its seqid."""
    return b"\x80\x01\x00\x02" + len(name).to_bytes(4, "big") + name


def void_reply(head: bytes, seqid: bytes) -> bytes:
    """The framed success reply of a void method (an empty result struct)."""
    return (len(head) + 5).to_bytes(4, "big") + head + seqid + b"\x00"


def transaction_reply(head: bytes, seqid: bytes, tx: Transaction) -> bytes:
    """The framed success reply of a method returning ``TTransaction`` (field 0)."""
    body = encode_transaction(tx)
    size = len(head) + len(body) + 8  # seqid, field header, STOP
    return size.to_bytes(4, "big") + head + seqid + b"\x0c\x00\x00" + body + b"\x00"


# -- client side -------------------------------------------------------------------------


def call_frame(name: bytes, args: bytes) -> bytes:
    """A framed ``CALL`` of ``name`` (seqid 0) with the encoded argument struct ``args``."""
    body = b"\x80\x01\x00\x01" + len(name).to_bytes(4, "big") + name + b"\x00\x00\x00\x00" + args
    return len(body).to_bytes(4, "big") + body


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I32.pack(len(data)) + data


def encode_client_id_args(client_id: str) -> bytes:
    """``(1: string clientId)``."""
    return _STRING_1 + _string(client_id) + b"\x00"


def encode_client_id_timeout_args(client_id: str, timeout: int) -> bytes:
    """``(1: string clientId, 2: i32 timeout)``."""
    return _STRING_1 + _string(client_id) + _I32_2 + _I32.pack(timeout) + b"\x00"


def encode_can_commit_args(tx: int, changes: list[bytes]) -> bytes:
    """``(1: i64 tx, 2: set<binary> changes)``; ``changes`` without duplicates."""
    parts = [_I64_1, _I64.pack(tx), _BINARY_SET_2, _I32.pack(len(changes))]
    for key in changes:
        parts.append(_I32.pack(len(key)))
        parts.append(key)
    parts.append(b"\x00")
    return b"".join(parts)


def encode_commit_args(tx_id: int, wp: int) -> bytes:
    """``(1: i64 txId, 2: i64 wp)``."""
    return _I64_1 + _I64.pack(tx_id) + _I64_2 + _I64.pack(wp) + b"\x00"


def result_offset(body: bytes, name: bytes) -> int | None:
    """Where the result struct starts in a ``REPLY`` to ``name``; None for anything else
    (an ``EXCEPTION``, another method's name, a short frame)."""
    end = 8 + len(name)
    if body[:4] != b"\x80\x01\x00\x02" or body[4:8] != len(name).to_bytes(4, "big"):
        return None
    if body[8:end] != name or len(body) < end + 4:
        return None
    return end + 4


def is_void_success(body: bytes, pos: int) -> bool:
    """The result struct at ``pos`` is empty: a void method succeeded."""
    return len(body) == pos + 1 and body[pos] == _STOP


def transaction_result(body: bytes, pos: int) -> Transaction | None:
    """The ``TTransaction`` of a successful start reply whose result struct is at
    ``pos``; None when the struct is anything else (e.g. a declared exception)."""
    if body[pos : pos + 3] != b"\x0c\x00\x00" or body[-1] != _STOP:
        return None
    try:
        return decode_transaction(body[pos + 3 : -1])
    except CodecError:
        return None
