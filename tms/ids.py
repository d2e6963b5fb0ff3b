"""``MessageId``: 20 bytes that order messages exactly as consumers see them.

``publish_ms(8) seq(2) write_ms(8) p_seq(2)``, big-endian, sequence numbers unsigned.
An inline message has ``write_ms = p_seq = 0``; a message stored in the payload table
carries the position of its payload row. Shown to users as 40 lower-case hex digits.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tms.errors import TmsInvalidArgumentError

__all__ = ["INLINE_PAYLOAD_POSITION", "MESSAGE_ID_SIZE", "MessageId"]

MESSAGE_ID_SIZE = 20
INLINE_PAYLOAD_POSITION = bytes(10)
"""The last 10 bytes of an inline message's id (``write_ms = p_seq = 0``)."""
_LAYOUT = struct.Struct(">qHqH")
_MAX_SEQ = 0xFFFF


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    """Ordered like its bytes (timestamps are non-negative)."""

    publish_ms: int
    seq: int
    write_ms: int = 0
    p_seq: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.publish_ms < 2**63 and 0 <= self.write_ms < 2**63):
            raise TmsInvalidArgumentError(
                f"message id timestamps out of range: {self.publish_ms}, {self.write_ms}"
            )
        if not (0 <= self.seq <= _MAX_SEQ and 0 <= self.p_seq <= _MAX_SEQ):
            raise TmsInvalidArgumentError(
                f"message id sequence numbers out of range: {self.seq}, {self.p_seq}"
            )

    def to_bytes(self) -> bytes:
        return _LAYOUT.pack(self.publish_ms, self.seq, self.write_ms, self.p_seq)

    @classmethod
    def from_bytes(cls, data: bytes) -> MessageId:
        if len(data) != MESSAGE_ID_SIZE:
            raise TmsInvalidArgumentError(
                f"a message id has {MESSAGE_ID_SIZE} bytes, got {len(data)}"
            )
        publish_ms, seq, write_ms, p_seq = _LAYOUT.unpack(data)
        return cls(publish_ms, seq, write_ms, p_seq)

    @property
    def hex(self) -> str:
        return self.to_bytes().hex()

    @classmethod
    def from_hex(cls, text: str) -> MessageId:
        try:
            data = bytes.fromhex(text)
        except ValueError as exc:
            raise TmsInvalidArgumentError(f"not a hex message id: {text!r}") from exc
        return cls.from_bytes(data)

    @property
    def is_payload_message(self) -> bool:
        """Whether the payload lives in the payload table."""
        return self.write_ms != 0 or self.p_seq != 0

    def __str__(self) -> str:
        return self.hex
