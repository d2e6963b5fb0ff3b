"""Thrift messages on the wire (framed transport, binary protocol); pure, no I/O.

* ``encode_message``: any reply, through thriftpy2's generic encoder.
* Hand-written codecs for the calls of a transaction's life (start, canCommit, commit),
  which are nearly all the traffic: ``parse_call`` reads a message header, the
  ``*_args`` functions read the argument layouts every Thrift compiler writes for them,
  ``void_reply`` / ``transaction_reply`` write their successful answers. They skip the
  generic machinery (a protocol object, an argument object, a result object per call).

Contract of the decoders: they return None for anything but the exact standard layout
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
from thriftpy2.transport.memory import TCyMemoryBuffer  # type: ignore[attr-defined]

from txn.codec import encode_transaction
from txn.transaction import Transaction

__all__ = [
    "Call",
    "can_commit_args",
    "client_id_args",
    "client_id_timeout_args",
    "commit_args",
    "encode_message",
    "no_args",
    "parse_call",
    "reply_head",
    "timeout_args",
    "transaction_reply",
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
