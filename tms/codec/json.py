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
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

from tms.codec.avro import ConsumeSpec
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.model import Message, RollbackDetail

__all__ = [
    "decode_consume_request",
    "decode_publish_request",
    "decode_publish_response",
    "decode_topic_properties",
    "encode_consume_request",
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
    return json.dumps(
        {
            "transactionWritePointer": detail.tx_write_pointer,
            "rollbackRange": {
                "startTimestamp": detail.start_ms,
                "startSequenceId": detail.start_seq,
                "endTimestamp": detail.end_ms,
                "endSequenceId": detail.end_seq,
            },
            "published": published,
        }
    ).encode()


def decode_publish_response(data: bytes) -> RollbackDetail:
    obj = loads_object(data, "PublishResponse")
    rr = obj.get("rollbackRange")
    wp = _int(obj.get("transactionWritePointer"), "transactionWritePointer")
    if wp is None or not isinstance(rr, dict):
        raise TmsInvalidArgumentError(
            "a rollback request needs transactionWritePointer and rollbackRange"
        )
    fields = ("startTimestamp", "startSequenceId", "endTimestamp", "endSequenceId")
    values = [_int(rr.get(f), f"rollbackRange.{f}", nullable=False) for f in fields]
    return RollbackDetail(wp, *values)  # type: ignore[arg-type]


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
