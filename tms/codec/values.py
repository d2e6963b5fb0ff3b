"""Values of the message and payload tables, and of the metadata table (pure).

Message table value, first byte = kind, with flag 0x80 when a per-message TTL follows::

    0x00 [ttl] payload                 non-transactional
    0x01 [ttl] tx_ptr(8) payload       transactional, payload inline
    0x02 [ttl] tx_ptr(8)               transactional reference into the payload table

``ttl`` is an int32 number of seconds. ``tx_ptr`` is signed: rollback (and cleanup of
invalid transactions) negates it. Kinds 0x00-0x02 without TTL are CDAP's LevelDB layout.

Payload table value: ``0x00 payload``, or ``0x80 ttl(4) payload``; the seal row of a
write pointer: ``0x01 publish_ms(8) seq(2)``, where its commit marker sits.
Metadata value: the topic's properties as a JSON object with sorted keys, UTF-8.

Idempotency value (the outcome of a keyed ``MarkersRequest``)::

    write_ms(8) count(4) { tx_ptr(8) start_ms(8) start_seq(2) end_ms(8) end_seq(2) } * count

Reads decode rows a chunk at a time (``decode_message_rows``, ``decode_payload_rows``): a
topic is read at a million rows a second, so the common value kinds are taken apart
inline there, with the general decoders for the rest.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tms.codec.keys import POSITION_SIZE
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.model import RollbackDetail

__all__ = [
    "MessageEntry",
    "MessageRowView",
    "PayloadRowView",
    "decode_idempotency_value",
    "decode_message_rows",
    "decode_message_value",
    "decode_metadata",
    "decode_payload_rows",
    "decode_payload_value",
    "decode_seal_value",
    "encode_idempotency_value",
    "encode_message_value",
    "encode_metadata",
    "encode_payload_value",
    "encode_seal_value",
    "idempotency_write_ms",
    "message_head",
    "negate_message_value",
]

_NON_TX, _TX_INLINE, _TX_REF = 0, 1, 2
_TTL_FLAG = 0x80
_PTR = struct.Struct(">q")
_TTL = struct.Struct(">i")
_IDEMPOTENCY_HEAD = struct.Struct(">qi")
_RANGE = struct.Struct(">qqHqH")
_SEAL = struct.Struct(">qH")
_NON_TX_HEAD = bytes([_NON_TX])


@dataclass(frozen=True, slots=True)
class MessageEntry:
    """One message-table value. ``payload`` is None for a payload-table reference;
    ``tx_write_pointer`` is None for a non-transactional message and negative once
    rolled back."""

    tx_write_pointer: int | None
    payload: bytes | None
    ttl_s: int | None = None

    @property
    def is_reference(self) -> bool:
        return self.payload is None


def encode_message_value(entry: MessageEntry) -> bytes:
    ttl = entry.ttl_s
    head_flag = _TTL_FLAG if ttl is not None else 0
    ttl_bytes = _TTL.pack(ttl) if ttl is not None else b""
    if entry.tx_write_pointer is None:
        if entry.payload is None:
            raise TmsCodecError("a non-transactional message needs a payload")
        return bytes([_NON_TX | head_flag]) + ttl_bytes + entry.payload
    ptr = _PTR.pack(entry.tx_write_pointer)
    if entry.payload is None:
        return bytes([_TX_REF | head_flag]) + ttl_bytes + ptr
    return bytes([_TX_INLINE | head_flag]) + ttl_bytes + ptr + entry.payload


def decode_message_value(value: bytes) -> MessageEntry:
    if not value:
        raise TmsCodecError("empty message value")
    head = value[0]
    kind = head & 0x7F
    pos = 1
    ttl = None
    if head & _TTL_FLAG:
        if len(value) < 5:
            raise TmsCodecError("message value truncated in its ttl")
        (ttl,) = _TTL.unpack_from(value, 1)
        pos = 5
    if kind == _NON_TX:
        return MessageEntry(None, value[pos:], ttl)
    if kind not in (_TX_INLINE, _TX_REF):
        raise TmsCodecError(f"unknown message value kind {kind}")
    if len(value) < pos + 8:
        raise TmsCodecError("message value truncated in its transaction pointer")
    (ptr,) = _PTR.unpack_from(value, pos)
    if kind == _TX_REF:
        if len(value) != pos + 8:
            raise TmsCodecError("payload reference with trailing bytes")
        return MessageEntry(ptr, None, ttl)
    return MessageEntry(ptr, value[pos + 8 :], ttl)


def message_head(tx_write_pointer: int | None) -> bytes:
    """What precedes the payload in the value of a message without a TTL: a message
    value is ``message_head(ptr) + payload`` (the publish path's one concatenation)."""
    if tx_write_pointer is None:
        return _NON_TX_HEAD
    return bytes([_TX_INLINE]) + _PTR.pack(tx_write_pointer)


MessageRowView = tuple[bytes, int | None, bytes | None, int | None]
"""A message row as reads take it: (position, write pointer, payload, ttl_s); the
position is the key's last ``POSITION_SIZE`` bytes (``tms.codec.keys``); the payload is
None for a payload-table reference."""


def decode_message_rows(rows: Iterable[tuple[bytes, bytes]]) -> list[MessageRowView]:
    """The ``(key, value)`` message rows as ``MessageRowView``s, in order (one call per
    chunk of rows: reads decode a million rows a second)."""
    out: list[MessageRowView] = []
    append = out.append
    for key, value in rows:
        head = value[0]
        if head == _NON_TX:
            append((key[-POSITION_SIZE:], None, value[1:], None))
        elif head == _TX_INLINE:
            ptr = int.from_bytes(value[1:9], "big", signed=True)
            append((key[-POSITION_SIZE:], ptr, value[9:], None))
        elif head == _TX_REF:
            ptr = int.from_bytes(value[1:9], "big", signed=True)
            append((key[-POSITION_SIZE:], ptr, None, None))
        else:
            entry = decode_message_value(value)
            append((key[-POSITION_SIZE:], entry.tx_write_pointer, entry.payload, entry.ttl_s))
    return out


PayloadRowView = tuple[bytes, int, bytes, int | None]
"""A payload row as reads take it: (position, write_ms, payload, ttl_s); the position is
the key's last ``POSITION_SIZE`` bytes (write_ms, p_seq)."""


def decode_payload_rows(rows: Iterable[tuple[bytes, bytes]]) -> list[PayloadRowView]:
    """The ``(key, value)`` payload rows as ``PayloadRowView``s, in order."""
    out: list[PayloadRowView] = []
    append = out.append
    for key, value in rows:
        position = key[-POSITION_SIZE:]
        write_ms = int.from_bytes(position[:8], "big")
        if value[0] == 0:
            append((position, write_ms, value[1:], None))
        else:
            payload, ttl = decode_payload_value(value)
            append((position, write_ms, payload, ttl))
    return out


def negate_message_value(value: bytes) -> bytes | None:
    """The value with its transaction pointer negated (rolled back), or None when the
    entry is not transactional or already negated."""
    entry = decode_message_value(value)
    if entry.tx_write_pointer is None or entry.tx_write_pointer < 0:
        return None
    return encode_message_value(MessageEntry(-entry.tx_write_pointer, entry.payload, entry.ttl_s))


def encode_payload_value(payload: bytes, ttl_s: int | None = None) -> bytes:
    if ttl_s is None:
        return b"\x00" + payload
    return bytes([_TTL_FLAG]) + _TTL.pack(ttl_s) + payload


def decode_payload_value(value: bytes) -> tuple[bytes, int | None]:
    if not value:
        raise TmsCodecError("empty payload value")
    if value[0] == 0:
        return value[1:], None
    if value[0] == _TTL_FLAG and len(value) >= 5:
        return value[5:], int(_TTL.unpack_from(value, 1)[0])
    raise TmsCodecError(f"unknown payload value header {value[0]}")


def encode_seal_value(marker: tuple[int, int]) -> bytes:
    """The seal row's value: where the commit marker sits (publish_ms, seq)."""
    return b"\x01" + _SEAL.pack(*marker)


def decode_seal_value(value: bytes) -> tuple[int, int]:
    if len(value) != 1 + _SEAL.size or value[0] != 1:
        raise TmsCodecError(f"not a seal value: {value!r}")
    ms, seq = _SEAL.unpack_from(value, 1)
    return int(ms), int(seq)


def encode_metadata(properties: Mapping[str, str]) -> bytes:
    return json.dumps(dict(sorted(properties.items())), separators=(",", ":")).encode()


def decode_metadata(value: bytes) -> dict[str, str]:
    try:
        data = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TmsCodecError(f"bad metadata value: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise TmsCodecError("metadata must be a JSON object of strings")
    return data


def encode_idempotency_value(write_ms: int, details: Sequence[RollbackDetail]) -> bytes:
    parts = [_IDEMPOTENCY_HEAD.pack(write_ms, len(details))]
    parts.extend(
        _RANGE.pack(d.tx_write_pointer, d.start_ms, d.start_seq, d.end_ms, d.end_seq)
        for d in details
    )
    return b"".join(parts)


def idempotency_write_ms(value: bytes) -> int:
    """When an idempotency row was written (without decoding its ranges)."""
    if len(value) < _IDEMPOTENCY_HEAD.size:
        raise TmsCodecError(f"idempotency value too short: {len(value)} bytes")
    return int.from_bytes(value[:8], "big", signed=True)


def decode_idempotency_value(value: bytes) -> tuple[int, tuple[RollbackDetail, ...]]:
    """(write_ms, details)."""
    head = _IDEMPOTENCY_HEAD.size
    if len(value) < head:
        raise TmsCodecError(f"idempotency value too short: {len(value)} bytes")
    write_ms, count = _IDEMPOTENCY_HEAD.unpack_from(value)
    if len(value) != head + count * _RANGE.size:
        raise TmsCodecError(f"idempotency value of {len(value)} bytes for {count} ranges")
    try:
        details = tuple(
            RollbackDetail(*_RANGE.unpack_from(value, head + i * _RANGE.size)) for i in range(count)
        )
    except TmsInvalidArgumentError as exc:
        raise TmsCodecError(f"bad range in an idempotency value: {exc}") from exc
    return int(write_ms), details
