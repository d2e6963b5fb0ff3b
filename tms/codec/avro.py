"""The v1 Avro wire format of the REST API (pure), byte-compatible with CDAP's client.

Plain Avro binary: no container, no schema fingerprint. Schemas (CDAP's v1)::

    PublishRequest  {transactionWritePointer: [long, null], messages: array<bytes>}
    PublishResponse {transactionWritePointer: [long, null],
                     rollbackRange: {startTimestamp: long, startSequenceId: int,
                                     endTimestamp: long, endSequenceId: int}}
    ConsumeRequest  {startFrom: [bytes, long, null], inclusive: boolean = true,
                     limit: [int, null], transaction: [bytes, null]}
    ConsumeResponse array<{id: bytes, payload: bytes}>

A publish response is the opaque rollback token: clients send those exact bytes back to
``rollback``. A consume response is streamed as Avro array blocks, one block per chunk,
closed by a 0 count.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from tms.errors import TmsCodecError
from tms.model import Message, RollbackDetail

__all__ = [
    "ARRAY_END",
    "CONSUME_REQUEST",
    "CONSUME_RESPONSE",
    "PUBLISH_REQUEST",
    "PUBLISH_RESPONSE",
    "ConsumeSpec",
    "decode_consume_request",
    "decode_consume_response",
    "decode_publish_request",
    "decode_publish_response",
    "encode_consume_blocks",
    "encode_consume_request",
    "encode_consume_response",
    "encode_publish_request",
    "encode_publish_response",
    "read_long",
    "write_long",
]

ARRAY_END = b"\x00"

PUBLISH_REQUEST: Any = parse_schema(
    {
        "type": "record",
        "name": "PublishRequest",
        "fields": [
            {"name": "transactionWritePointer", "type": ["long", "null"]},
            {"name": "messages", "type": {"type": "array", "items": "bytes"}},
        ],
    }
)
PUBLISH_RESPONSE: Any = parse_schema(
    {
        "type": "record",
        "name": "PublishResponse",
        "fields": [
            {"name": "transactionWritePointer", "type": ["long", "null"]},
            {
                "name": "rollbackRange",
                "type": {
                    "type": "record",
                    "name": "RollbackRange",
                    "fields": [
                        {"name": "startTimestamp", "type": "long"},
                        {"name": "startSequenceId", "type": "int"},
                        {"name": "endTimestamp", "type": "long"},
                        {"name": "endSequenceId", "type": "int"},
                    ],
                },
            },
        ],
    }
)
CONSUME_REQUEST: Any = parse_schema(
    {
        "type": "record",
        "name": "ConsumeRequest",
        "fields": [
            {"name": "startFrom", "type": ["bytes", "long", "null"]},
            {"name": "inclusive", "type": "boolean", "default": True},
            {"name": "limit", "type": ["int", "null"]},
            {"name": "transaction", "type": ["bytes", "null"]},
        ],
    }
)
CONSUME_RESPONSE: Any = parse_schema(
    {
        "type": "array",
        "items": {
            "type": "record",
            "name": "Messages",
            "fields": [{"name": "id", "type": "bytes"}, {"name": "payload", "type": "bytes"}],
        },
    }
)


def _write(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


def _read(schema: Any, data: bytes, what: str) -> Any:
    buf = io.BytesIO(data)
    try:
        record = schemaless_reader(buf, schema)
    except Exception as exc:  # fastavro raises several unrelated types on bad input
        raise TmsCodecError(f"malformed Avro {what}: {exc}") from exc
    if buf.tell() != len(data):
        raise TmsCodecError(f"malformed Avro {what}: {len(data) - buf.tell()} trailing bytes")
    return record


# -- publish ------------------------------------------------------------------------------


def encode_publish_request(tx_write_pointer: int | None, messages: Iterable[bytes]) -> bytes:
    return _write(
        PUBLISH_REQUEST, {"transactionWritePointer": tx_write_pointer, "messages": list(messages)}
    )


def decode_publish_request(data: bytes) -> tuple[int | None, list[bytes]]:
    record = _read(PUBLISH_REQUEST, data, "PublishRequest")
    return record["transactionWritePointer"], list(record["messages"])


def publish_response_record(detail: RollbackDetail) -> dict[str, Any]:
    """A PublishResponse as a record of the v1 schema's fields (the JSON body's shape too)."""
    return {
        "transactionWritePointer": detail.tx_write_pointer,
        "rollbackRange": {
            "startTimestamp": detail.start_ms,
            "startSequenceId": detail.start_seq,
            "endTimestamp": detail.end_ms,
            "endSequenceId": detail.end_seq,
        },
    }


def encode_publish_response(detail: RollbackDetail) -> bytes:
    return _write(PUBLISH_RESPONSE, publish_response_record(detail))


def decode_publish_response(data: bytes) -> RollbackDetail:
    record = _read(PUBLISH_RESPONSE, data, "PublishResponse")
    rr = record["rollbackRange"]
    wp = record["transactionWritePointer"]
    if wp is None:
        raise TmsCodecError("a rollback token needs a transaction write pointer")
    return RollbackDetail(
        wp, rr["startTimestamp"], rr["startSequenceId"], rr["endTimestamp"], rr["endSequenceId"]
    )


# -- consume ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumeSpec:
    """A decoded ConsumeRequest: ``start_from`` is message-id bytes, a timestamp, or None."""

    start_from: bytes | int | None = None
    inclusive: bool = True
    limit: int | None = None
    transaction: bytes | None = None


def encode_consume_request(spec: ConsumeSpec) -> bytes:
    return _write(
        CONSUME_REQUEST,
        {
            "startFrom": spec.start_from,
            "inclusive": spec.inclusive,
            "limit": spec.limit,
            "transaction": spec.transaction,
        },
    )


def decode_consume_request(data: bytes) -> ConsumeSpec:
    record = _read(CONSUME_REQUEST, data, "ConsumeRequest")
    return ConsumeSpec(
        record["startFrom"], record["inclusive"], record["limit"], record["transaction"]
    )


def write_long(out: bytearray, value: int) -> None:
    """Append an Avro long (zig-zag varint)."""
    n = (value << 1) ^ (value >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_consume_blocks(
    messages: Iterable[Message], chunk_bytes: int = 60_000
) -> Iterator[bytes]:
    """Avro array blocks (count, items) of about ``chunk_bytes`` each, at least one message
    per block, without the closing 0 count (for streaming several batches)."""
    block = bytearray()
    count = 0
    size = 0
    for mid, payload in messages:
        block.append(40)  # zig-zag of 20: every id is 20 bytes
        block += mid
        write_long(block, len(payload))
        block += payload
        count += 1
        size += 28 + len(payload)
        if size >= chunk_bytes:
            yield _block(count, block)
            block, count, size = bytearray(), 0, 0
    if count:
        yield _block(count, block)


def _block(count: int, items: bytearray) -> bytes:
    head = bytearray()
    write_long(head, count)
    return bytes(head + items)


def encode_consume_response(
    messages: Iterable[Message], chunk_bytes: int = 60_000
) -> Iterator[bytes]:
    """The whole array as chunks: the blocks, then the closing 0 count."""
    yield from encode_consume_blocks(messages, chunk_bytes)
    yield ARRAY_END


def decode_consume_response(data: bytes) -> list[Message]:
    """The messages of a ConsumeResponse (an array of ``{id: bytes, payload: bytes}``).

    Decoded by hand rather than by fastavro: the schema is fixed and tiny, and building
    a dict per record and then a message from it cost a consumer more than the read
    itself (0.67 against 0.43 us a message on the project's VM). Any violation of the
    schema's encoding (truncation, negative lengths, trailing bytes) is a
    ``TmsCodecError``."""
    try:
        messages, end = _decode_messages(data)
    except IndexError:
        raise TmsCodecError("malformed Avro ConsumeResponse: truncated") from None
    if end != len(data):
        raise TmsCodecError(f"malformed Avro ConsumeResponse: {len(data) - end} trailing bytes")
    return messages


def _decode_messages(data: bytes) -> tuple[list[Message], int]:
    out: list[Message] = []
    append = out.append
    pos = 0
    while True:
        count, pos = _read_long(data, pos)
        if count == 0:
            return out, pos
        if count < 0:  # a block with its size in bytes: not needed to decode
            count = -count
            _size, pos = _read_long(data, pos)
        for _ in range(count):
            # Lengths are read inline (a call per message would cost more than the
            # rest); only an id that is not 20 bytes takes the general way. An odd
            # zig-zag value is a negative length. Reading past the end raises IndexError
            # at the next varint; a varint of 0xff bytes runs to the end of the data.
            b = data[pos]
            pos += 1
            if b == 40:  # 20 bytes: every id of ours
                end = pos + 20
            else:
                size, pos = _read_long(data, pos - 1)
                if size < 0:
                    raise TmsCodecError("malformed Avro ConsumeResponse: negative id length")
                end = pos + size
            mid = data[pos:end]
            b = data[end]
            pos = end + 1
            n = b & 0x7F
            shift = 7
            while b & 0x80:
                b = data[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                shift += 7
            if n & 1:
                raise TmsCodecError("malformed Avro ConsumeResponse: negative payload length")
            end = pos + (n >> 1)
            append(Message((mid, data[pos:end])))
            pos = end


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``pos``, and the position after it."""
    b = data[pos]
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        pos += 1
        b = data[pos]
        n |= (b & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise TmsCodecError("malformed Avro ConsumeResponse: varint too long")
    return (n >> 1) ^ -(n & 1), pos + 1


read_long = _read_long  # for the other decoders of these bodies (IndexError when truncated)
