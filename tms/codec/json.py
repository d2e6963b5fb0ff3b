"""The JSON wire format of the REST API (pure). Bytes are base64 (standard alphabet),
message ids 40 lower-case hex digits, times milliseconds since the epoch.

::

    PublishRequest  {"transactionWritePointer": int | null,
                     "messages": ["<base64>" | {"payload": "<base64>", "ttl": seconds}, ...]}
    PublishResponse {"transactionWritePointer": int,
                     "rollbackRange": {"startTimestamp", "startSequenceId",
                                       "endTimestamp", "endSequenceId"}}     (transactional)
                    {"published": n}                                       (otherwise)
    ConsumeRequest  {"startFrom": "<hex id>" | int | null, "inclusive": bool,
                     "limit": int | null, "transaction": "<base64 TransactionCodec>" | null}
    ConsumeResponse {"messages": [{"id": "<hex>", "payload": "<base64>",
                                   "publishTime": ms}, ...], "held": bool}
    MarkersRequest  {"transactionWritePointers": [int, ...], "idempotencyKey": str | null}
    MarkersResponse {"markers": [PublishResponse without "published", ...],
                     "duplicate": bool}
    Bounds          {"first" | "last" | "held": {"id": "<hex>", "publishTime": ms,
                                                 "sequenceId": int} | null,
                     "counted": int | null, "afterLimit": "<hex id>" | null}
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

from tms.codec.avro import ConsumeSpec, publish_response_record
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.ids import MessageId
from tms.model import MarkersResult, Message, RollbackDetail, TopicBounds

__all__ = [
    "decode_bounds",
    "decode_consume_request",
    "decode_markers_request",
    "decode_markers_response",
    "decode_publish_request",
    "decode_publish_response",
    "decode_topic_properties",
    "encode_bounds",
    "encode_consume_request",
    "encode_markers_request",
    "encode_markers_response",
    "encode_messages",
    "encode_publish_request",
    "encode_publish_response",
    "loads_object",
]


def loads_object(data: bytes, what: str) -> dict[str, Any]:
    """Parse a JSON object (an empty body is ``{}``)."""
    if not data.strip():
        return {}
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TmsCodecError(f"malformed JSON {what}: {exc}") from exc
    if not isinstance(value, dict):
        raise TmsCodecError(f"{what} must be a JSON object")
    return value


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise TmsInvalidArgumentError(f"{what} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TmsInvalidArgumentError(f"{what} is not valid base64: {exc}") from exc


def _int(value: Any, what: str, *, nullable: bool = True) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TmsInvalidArgumentError(f"{what} must be an integer")
    return value


def _required_int(value: Any, what: str) -> int:
    result = _int(value, what, nullable=False)
    assert result is not None
    return result


def decode_topic_properties(data: bytes) -> dict[str, str]:
    """Topic properties: a JSON object of strings (numbers are accepted and kept as text)."""
    obj = loads_object(data, "topic properties")
    props: dict[str, str] = {}
    for key, value in obj.items():
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise TmsInvalidArgumentError(
                "Invalid topic properties. It must be JSON object with string values."
            )
        props[key] = str(value)
    return props


def encode_publish_request(
    tx_write_pointer: int | None,
    payloads: Iterable[bytes],
    ttls: Iterable[int | None] | None = None,
) -> bytes:
    ttl_list = list(ttls) if ttls is not None else None
    messages: list[Any] = []
    for i, payload in enumerate(payloads):
        text = base64.b64encode(payload).decode()
        ttl = ttl_list[i] if ttl_list is not None else None
        messages.append(text if ttl is None else {"payload": text, "ttl": ttl})
    return json.dumps({"transactionWritePointer": tx_write_pointer, "messages": messages}).encode()


def decode_publish_request(data: bytes) -> tuple[int | None, list[bytes], list[int | None] | None]:
    obj = loads_object(data, "PublishRequest")
    wp = _int(obj.get("transactionWritePointer"), "transactionWritePointer")
    raw = obj.get("messages", [])
    if not isinstance(raw, list):
        raise TmsInvalidArgumentError("messages must be a list")
    payloads: list[bytes] = []
    ttls: list[int | None] = []
    for i, item in enumerate(raw):
        if isinstance(item, dict):
            payloads.append(_b64(item.get("payload"), f"messages[{i}].payload"))
            ttls.append(_int(item.get("ttl"), f"messages[{i}].ttl"))
        else:
            payloads.append(_b64(item, f"messages[{i}]"))
            ttls.append(None)
    return wp, payloads, (ttls if any(t is not None for t in ttls) else None)


def encode_publish_response(detail: RollbackDetail | None, published: int) -> bytes:
    if detail is None:
        return json.dumps({"published": published}).encode()
    return json.dumps({**publish_response_record(detail), "published": published}).encode()


def decode_publish_response(data: bytes) -> RollbackDetail:
    return _decode_detail(loads_object(data, "PublishResponse"))


def _decode_detail(obj: dict[str, Any]) -> RollbackDetail:
    rr = obj.get("rollbackRange")
    wp = _int(obj.get("transactionWritePointer"), "transactionWritePointer")
    if wp is None or not isinstance(rr, dict):
        raise TmsInvalidArgumentError(
            "a rollback request needs transactionWritePointer and rollbackRange"
        )
    fields = ("startTimestamp", "startSequenceId", "endTimestamp", "endSequenceId")
    values = [_required_int(rr.get(f), f"rollbackRange.{f}") for f in fields]
    return RollbackDetail(wp, *values)


def encode_consume_request(spec: ConsumeSpec) -> bytes:
    start: Any = spec.start_from.hex() if isinstance(spec.start_from, bytes) else spec.start_from
    tx = base64.b64encode(spec.transaction).decode() if spec.transaction is not None else None
    return json.dumps(
        {"startFrom": start, "inclusive": spec.inclusive, "limit": spec.limit, "transaction": tx}
    ).encode()


def decode_consume_request(data: bytes) -> ConsumeSpec:
    obj = loads_object(data, "ConsumeRequest")
    start = obj.get("startFrom")
    start_from: bytes | int | None
    if isinstance(start, str):
        try:
            start_from = bytes.fromhex(start)
        except ValueError as exc:
            raise TmsInvalidArgumentError(f"startFrom is not a hex message id: {start!r}") from exc
    else:
        start_from = _int(start, "startFrom")
    inclusive = obj.get("inclusive", True)
    if not isinstance(inclusive, bool):
        raise TmsInvalidArgumentError("inclusive must be true or false")
    limit = _int(obj.get("limit"), "limit")
    tx_text = obj.get("transaction")
    transaction = _b64(tx_text, "transaction") if tx_text is not None else None
    return ConsumeSpec(start_from, inclusive, limit, transaction)


def encode_messages(messages: Iterable[Message], first: bool) -> bytes:
    """The JSON array items of ``messages``, comma-separated (``first``: no leading comma)."""
    b64 = base64.b64encode
    parts = [
        f'{{"id":"{mid.hex()}","payload":"{b64(payload).decode()}",'
        f'"publishTime":{int.from_bytes(mid[:8], "big")}}}'
        for mid, payload in messages
    ]
    text = ",".join(parts)
    if text and not first:
        text = "," + text
    return text.encode()


def encode_markers_request(write_pointers: Iterable[int], idempotency_key: str | None) -> bytes:
    return json.dumps(
        {"transactionWritePointers": list(write_pointers), "idempotencyKey": idempotency_key}
    ).encode()


def decode_markers_request(data: bytes) -> tuple[tuple[int, ...], str | None]:
    """(write pointers, idempotency key); ``tms.model.MarkersRequest`` checks the values."""
    obj = loads_object(data, "MarkersRequest")
    raw = obj.get("transactionWritePointers")
    if not isinstance(raw, list):
        raise TmsInvalidArgumentError("transactionWritePointers must be a list of integers")
    pointers = tuple(
        _required_int(wp, f"transactionWritePointers[{i}]") for i, wp in enumerate(raw)
    )
    key = obj.get("idempotencyKey")
    if key is not None and not isinstance(key, str):
        raise TmsInvalidArgumentError("idempotencyKey must be a string")
    return pointers, key


def encode_markers_response(result: MarkersResult) -> bytes:
    return json.dumps(
        {
            "markers": [publish_response_record(d) for d in result.details],
            "duplicate": result.duplicate,
        }
    ).encode()


def decode_markers_response(data: bytes) -> MarkersResult:
    obj = loads_object(data, "MarkersResponse")
    markers = obj.get("markers")
    if not isinstance(markers, list) or not all(isinstance(m, dict) for m in markers):
        raise TmsInvalidArgumentError("markers must be a list of objects")
    return MarkersResult(tuple(map(_decode_detail, markers)), obj.get("duplicate") is True)


def encode_bounds(bounds: TopicBounds) -> bytes:
    def position(value: tuple[int, int] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        ms, seq = value
        return {"id": MessageId(ms, seq).to_bytes().hex(), "publishTime": ms, "sequenceId": seq}

    return json.dumps(
        {
            "first": position(bounds.first),
            "last": position(bounds.last),
            "held": position(bounds.held),
            "counted": bounds.counted,
            "afterLimit": bounds.after_limit.hex if bounds.after_limit is not None else None,
        }
    ).encode()


def decode_bounds(data: bytes) -> TopicBounds:
    obj = loads_object(data, "Bounds")

    def position(name: str) -> tuple[int, int] | None:
        value = obj.get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise TmsInvalidArgumentError(f"{name} must be an object or null")
        ms = _required_int(value.get("publishTime"), f"{name}.publishTime")
        seq = _required_int(value.get("sequenceId"), f"{name}.sequenceId")
        return ms, seq

    counted = obj.get("counted")
    if counted is not None:
        counted = _required_int(counted, "counted")
    after = obj.get("afterLimit")
    if after is not None and not isinstance(after, str):
        raise TmsInvalidArgumentError("afterLimit must be a hex message id or null")
    return TopicBounds(
        position("first"),
        position("last"),
        position("held"),
        counted,
        MessageId.from_hex(after) if after is not None else None,
    )
