"""The messaging service's Avro bodies to and from Arrow columns, without a Python object
per message (pure functions; ``tms.codec.avro`` is the reference they must agree with).

* ``publish_body(write_pointer, payloads)``: a ``PublishRequest`` (Avro, v1 schema) for
  the values of a binary Arrow array, byte for byte what
  ``tms.codec.avro.encode_publish_request`` writes for the same payloads. The varint
  lengths are computed for the whole array at once (numpy) and joined to the values by
  Arrow's ``binary_join_element_wise``.
* ``consume_batch(body, topic)``: a ``ConsumeResponse`` as a record batch of the ``tms``
  read schema (``id`` hex string, ``publish_time``, ``payload``, ``topic``). One pass
  over the records finds where each id and payload lies (a few integer operations per
  message); the columns are then cut from the body by Arrow (``take``) and numpy (the
  ids' hex, the publish times from the ids' first 8 bytes). Anything the schema does not
  allow (truncation, negative lengths, trailing bytes, an id that is not 20 bytes) is a
  ``TmsCodecError``, as in ``decode_consume_response``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tms.codec.avro import read_long, write_long
from tms.errors import TmsCodecError

__all__ = ["READ_SCHEMA", "consume_batch", "messages_batch", "publish_body"]

READ_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("publish_time", pa.timestamp("us", tz="UTC")),
        ("payload", pa.binary()),
        ("topic", pa.string()),
    ]
)
_ID = 20
_VARINT_MAX = 10  # bytes of a 64-bit varint
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_EMPTY = pa.scalar(b"", pa.binary())


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Avro's zig-zag varints of non-negative ``values`` (int64): (their bytes, one
    after the other; the number of bytes of each)."""
    z = values.astype(np.uint64) << np.uint64(1)
    size = np.ones(len(z), np.int64)
    for more_bytes in range(1, _VARINT_MAX):
        over = z >= np.uint64(1) << np.uint64(7 * more_bytes)
        if not over.any():
            break
        size += over
    k = np.arange(int(size.max(initial=1)), dtype=np.uint64)
    groups = ((z[:, None] >> (k * np.uint64(7))) & np.uint64(0x7F)).astype(np.uint8)
    more = k[None, :].astype(np.int64) < (size[:, None] - 1)
    groups |= more.astype(np.uint8) << np.uint8(7)
    keep = k[None, :].astype(np.int64) < size[:, None]
    return groups[keep], size


def _long(value: int) -> bytes:
    out = bytearray()
    write_long(out, value)
    return bytes(out)


def publish_body(write_pointer: int | None, payloads: pa.Array) -> bytes:
    """A ``PublishRequest`` with ``payloads`` (binary, no nulls) as its messages."""
    values = payloads if payloads.type == pa.binary() else payloads.cast(pa.binary())
    if values.null_count:
        raise TmsCodecError("a payload must not be null")
    # the union ["long", "null"]: branch 0, then the long; or branch 1
    head = b"\x02" if write_pointer is None else b"\x00" + _long(write_pointer)
    n = len(values)
    if n == 0:
        return head + b"\x00"
    lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
    data, size = _varints(lengths)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(size, out=offsets[1:])
    prefixes = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    joined = pc.binary_join_element_wise(prefixes, values, _EMPTY)
    buffers = joined.buffers()
    ends = np.frombuffer(buffers[1], np.int32, n + 1, joined.offset * 4)
    items = memoryview(buffers[2])[int(ends[0]) : int(ends[-1])]
    return b"".join((head, _long(n), items, b"\x00"))


def _bounds(body: bytes) -> tuple[list[int], list[int], list[int]]:
    """Where each record's id starts, and its payload starts and ends."""
    try:
        ids, starts, ends, pos = _scan(body)
    except IndexError:
        raise TmsCodecError("malformed Avro ConsumeResponse: truncated") from None
    if pos != len(body) or (ends and ends[-1] > len(body)):
        raise TmsCodecError("malformed Avro ConsumeResponse: truncated or trailing bytes")
    return ids, starts, ends


def _scan(body: bytes) -> tuple[list[int], list[int], list[int], int]:
    # Lengths of one and two bytes (payloads under 8 KiB) are read inline: a call per
    # message would cost more than the rest. Reading past the end raises IndexError.
    ids: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    add_id, add_start, add_end = ids.append, starts.append, ends.append
    pos = 0
    while True:
        count, pos = read_long(body, pos)
        if count == 0:
            return ids, starts, ends, pos
        if count < 0:
            count = -count
            _, pos = read_long(body, pos)
        for _ in range(count):
            if body[pos] == 2 * _ID:
                pos += 1
            else:
                length, pos = read_long(body, pos)
                if length != _ID:
                    raise TmsCodecError(f"malformed Avro ConsumeResponse: an id of {length} bytes")
            add_id(pos)
            pos += _ID
            b = body[pos]
            if b < 0x80:
                z = b
                pos += 1
            elif body[pos + 1] < 0x80:
                z = (b & 0x7F) | body[pos + 1] << 7
                pos += 2
            else:
                z, pos = read_long(body, pos)
                z = z << 1 if z >= 0 else 1
            if z & 1:
                raise TmsCodecError("malformed Avro ConsumeResponse: negative payload length")
            add_start(pos)
            pos += z >> 1
            add_end(pos)


def _id_columns(ids: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """The ``id`` (hex) and ``publish_time`` columns of message ids (an n x 20 array)."""
    n = len(ids)
    hexed = np.empty((n, 2 * _ID), np.uint8)
    hexed[:, 0::2] = _HEX[ids >> 4]
    hexed[:, 1::2] = _HEX[ids & 0x0F]
    offsets = np.arange(0, 2 * _ID * (n + 1), 2 * _ID, dtype=np.int32)
    id_col = pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(hexed)]
    )
    ms = ids[:, :8].copy().view(">u8").reshape(n).astype(np.int64) * 1000
    return id_col, pa.array(ms, pa.timestamp("us", tz="UTC"))


def messages_batch(messages: Sequence[tuple[bytes, bytes]], topic: str) -> pa.RecordBatch:
    """Messages already decoded (the binary protocol's poll answer: its ids and payloads
    are read by thriftpy2 in C) as a record batch of ``READ_SCHEMA``."""
    n = len(messages)
    joined = b"".join(m[0] for m in messages)
    if len(joined) != _ID * n:
        raise TmsCodecError("a message id that is not 20 bytes")
    id_col, times = _id_columns(np.frombuffer(joined, np.uint8).reshape(n, _ID))
    return pa.RecordBatch.from_arrays(
        [
            id_col,
            times,
            pa.array([m[1] for m in messages], pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
        ],
        schema=READ_SCHEMA,
    )


def consume_batch(body: bytes, topic: str) -> pa.RecordBatch:
    """The messages of a ``ConsumeResponse`` as a record batch of ``READ_SCHEMA``."""
    id_at, starts, ends = _bounds(body)
    n = len(id_at)
    raw = np.frombuffer(body, np.uint8)
    id_col, times = _id_columns(raw[np.asarray(id_at, np.int64)[:, None] + np.arange(_ID)])
    # Every record's bytes as one binary array, cut at each payload's start and end: the
    # payloads are its odd elements.
    cuts = np.empty(2 * n + 1, np.int32)
    cuts[0] = 0
    cuts[1::2] = starts
    cuts[2::2] = ends
    pieces = pa.Array.from_buffers(
        pa.binary(), 2 * n, [None, pa.py_buffer(cuts), pa.py_buffer(body)]
    )
    payloads = pieces.take(pa.array(np.arange(1, 2 * n, 2, dtype=np.int32)))
    return pa.RecordBatch.from_arrays(
        [
            id_col,
            times,
            payloads,
            pa.repeat(pa.scalar(topic, pa.string()), n),
        ],
        schema=READ_SCHEMA,
    )
