"""Row keys of the three tables, as the design lays them out (pure).

::

    metadata row  := UTF8(namespace ":" topic ":")
    topic prefix  := metadata row || int32 generation
    message row   := topic prefix || int64 publish_ms || uint16 seq
    payload row   := topic prefix || int64 tx_write_pointer || int64 write_ms || uint16 p_seq
    idempotency   := topic prefix || ASCII(key)        (its own table)

Big-endian throughout; LevelDB compares keys as unsigned bytes, so for non-negative
numbers key order is numeric order: message rows sort in consumption order, payload rows
by (write pointer, write time, sequence). Names cannot contain ``:``, so one topic's rows
are never a prefix of another's.

A data row's key ends with its *position*: ``publish_ms seq`` for a message row,
``write_ms p_seq`` for a payload row (``POSITION_SIZE`` bytes); a message id is the two
(``tms.ids``). A write pointer's *seal* row sits at ``SEAL_POSITION``, after all its
payload rows.
"""

from __future__ import annotations

import struct

from tms.errors import TmsCodecError
from tms.model import TopicId

__all__ = [
    "POSITION_SIZE",
    "SEAL_POSITION",
    "decode_message_key",
    "decode_payload_key",
    "decode_position",
    "generation_of",
    "idempotency_key",
    "message_key",
    "metadata_key",
    "namespace_prefix",
    "pack_position",
    "payload_key",
    "payload_prefix",
    "stop_key_for_prefix",
    "topic_id_from_metadata_key",
    "topic_name_prefix",
    "topic_prefix",
]

_GEN = struct.Struct(">i")
_MSG = struct.Struct(">qH")
_PAYLOAD = struct.Struct(">qqH")
_WP = struct.Struct(">q")

POSITION_SIZE = _MSG.size
SEAL_POSITION = (2**63 - 1, 0xFFFF)
pack_position = _MSG.pack
"""``(ms, seq)`` -> the ``POSITION_SIZE`` bytes that end a data row's key."""


def decode_position(position: bytes) -> tuple[int, int]:
    """``(ms, seq)`` of a key's last ``POSITION_SIZE`` bytes."""
    ms, seq = _MSG.unpack_from(position, len(position) - POSITION_SIZE)
    return ms, seq


def metadata_key(topic: TopicId) -> bytes:
    return f"{topic.namespace}:{topic.topic}:".encode()


def namespace_prefix(namespace: str) -> bytes:
    return f"{namespace}:".encode()


def topic_id_from_metadata_key(key: bytes) -> TopicId:
    text = key.decode()
    namespace, sep, rest = text.partition(":")
    if not sep or not rest.endswith(":"):
        raise TmsCodecError(f"not a metadata key: {key!r}")
    return TopicId(namespace, rest[:-1])


def topic_name_prefix(topic: TopicId) -> bytes:
    """The prefix of every generation of ``topic``'s data rows."""
    return metadata_key(topic)


def topic_prefix(topic: TopicId, generation: int) -> bytes:
    return metadata_key(topic) + _GEN.pack(generation)


def generation_of(key: bytes, name_prefix_len: int) -> int:
    """The generation of a data row of a topic whose name prefix has the given length."""
    return int(_GEN.unpack_from(key, name_prefix_len)[0])


def message_key(prefix: bytes, publish_ms: int, seq: int) -> bytes:
    return prefix + _MSG.pack(publish_ms, seq)


def decode_message_key(key: bytes) -> tuple[int, int, int]:
    """(generation, publish_ms, seq) of a message row."""
    if len(key) < 14:
        raise TmsCodecError(f"message key too short: {key!r}")
    publish_ms, seq = _MSG.unpack_from(key, len(key) - 10)
    (generation,) = _GEN.unpack_from(key, len(key) - 14)
    return generation, publish_ms, seq


def payload_prefix(prefix: bytes, tx_write_pointer: int) -> bytes:
    return prefix + _WP.pack(tx_write_pointer)


def payload_key(prefix: bytes, tx_write_pointer: int, write_ms: int, p_seq: int) -> bytes:
    return prefix + _PAYLOAD.pack(tx_write_pointer, write_ms, p_seq)


def decode_payload_key(key: bytes) -> tuple[int, int, int, int]:
    """(generation, tx_write_pointer, write_ms, p_seq) of a payload row."""
    if len(key) < 22:
        raise TmsCodecError(f"payload key too short: {key!r}")
    wp, write_ms, p_seq = _PAYLOAD.unpack_from(key, len(key) - 18)
    (generation,) = _GEN.unpack_from(key, len(key) - 22)
    return generation, wp, write_ms, p_seq


def stop_key_for_prefix(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``; None if there is
    none (all bytes 0xFF: scan to the end)."""
    for i in range(len(prefix) - 1, -1, -1):
        if prefix[i] != 0xFF:
            return prefix[:i] + bytes([prefix[i] + 1])
    return None


def idempotency_key(prefix: bytes, key: str) -> bytes:
    """The row of an idempotency key in a topic generation (``prefix``)."""
    return prefix + key.encode("ascii")
