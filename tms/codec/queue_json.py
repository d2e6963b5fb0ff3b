"""The JSON wire format of the queue routes (pure). Payloads are base64, message ids 20
lower-case hex digits, receipts ``"<id hex>.<attempt>"``, times ms since the epoch.

::

    EnqueueRequest  {"transactionWritePointer": int | null,
                     "messages": [{"payload": "<base64>", "key": str, "delayMs": int,
                                   "at": ms, "priority": int}, ...]}   (all but payload optional)
    EnqueueResponse {"messages": [{"id": "<hex>", "duplicate": bool}, ...]}
    ReceiveRequest  {"max": int, "leaseMs": int | null}
    ReceiveResponse {"messages": [QueueMessage, ...], "nextDue": ms | null}
    QueueMessage    {"id", "receipt", "payload", "attempt", "enqueueTime", "due",
                     "priority", "leaseExpires", "key": str | null}
    AckRequest      {"receipts": ["<receipt>", ...], "transactionWritePointer": int | null}
    NackRequest     {"receipts": ["<receipt>", ...], "delayMs": int | null}
    AckResponse     {"outcomes": ["acked" | "pending" | "returned" | "dead" |
                                  "lease_lost" | "unknown", ...]}      (one per receipt)
    SettleRequest   {"transactionWritePointer": int, "commit": bool}
    SettleResponse  {"settled": int}
    QueueStats      {"pending", "scheduled", "ready", "leased", "acked", "dead": int,
                     "oldestReadyTime": ms | null}
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from tms.codec.json import _b64, _int, loads_object
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.model import TopicId
from tms.queues import (
    AckOutcome,
    AckRequest,
    Enqueued,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    QueueMessage,
    QueueStats,
    Receipt,
    ReceiveRequest,
    ReceiveResult,
    SettleRequest,
)

__all__ = [
    "decode_ack_request",
    "decode_enqueue_request",
    "decode_enqueue_response",
    "decode_nack_request",
    "decode_outcomes",
    "decode_queue_stats",
    "decode_receive_request",
    "decode_receive_response",
    "decode_settle_request",
    "encode_ack_request",
    "encode_enqueue_request",
    "encode_enqueue_response",
    "encode_nack_request",
    "encode_outcomes",
    "encode_queue_message",
    "encode_queue_stats",
    "encode_receive_request",
    "encode_receive_response",
    "encode_settle_request",
]


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TmsInvalidArgumentError(f"{what} must be a JSON array")
    return value


# -- enqueue ----------------------------------------------------------------------------


def encode_enqueue_request(items: Sequence[EnqueueItem], tx_write_pointer: int | None) -> bytes:
    messages = []
    for item in items:
        m: dict[str, Any] = {"payload": base64.b64encode(item.payload).decode()}
        if item.key is not None:
            m["key"] = item.key
        if item.at_ms is not None:
            m["at"] = item.at_ms
        elif item.delay_ms:
            m["delayMs"] = item.delay_ms
        if item.priority:
            m["priority"] = item.priority
        messages.append(m)
    return _dumps({"transactionWritePointer": tx_write_pointer, "messages": messages})


def decode_enqueue_request(topic: TopicId, data: bytes) -> EnqueueRequest:
    obj = loads_object(data, "enqueue request")
    items = []
    for i, m in enumerate(_list(obj.get("messages"), "messages")):
        if not isinstance(m, dict):
            raise TmsInvalidArgumentError(f"messages[{i}] must be an object")
        unknown = set(m) - {"payload", "key", "delayMs", "at", "priority"}
        if unknown:
            raise TmsInvalidArgumentError(f"messages[{i}] has unknown fields {sorted(unknown)}")
        items.append(
            EnqueueItem(
                _b64(m.get("payload"), f"messages[{i}].payload"),
                key=m.get("key"),
                delay_ms=_int(m.get("delayMs", 0), "delayMs", nullable=False) or 0,
                at_ms=_int(m.get("at"), "at"),
                priority=_int(m.get("priority", 0), "priority", nullable=False) or 0,
            )
        )
    return EnqueueRequest(topic, items, _int(obj.get("transactionWritePointer"), "write pointer"))


def encode_enqueue_response(results: Sequence[Enqueued]) -> bytes:
    return _dumps({"messages": [{"id": r.id.hex(), "duplicate": r.duplicate} for r in results]})


def decode_enqueue_response(data: bytes) -> list[Enqueued]:
    obj = loads_object(data, "enqueue response")
    try:
        return [Enqueued(bytes.fromhex(m["id"]), bool(m["duplicate"])) for m in obj["messages"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise TmsCodecError(f"malformed enqueue response: {exc}") from exc


# -- receive ----------------------------------------------------------------------------


def encode_receive_request(max_messages: int, lease_ms: int | None) -> bytes:
    return _dumps({"max": max_messages, "leaseMs": lease_ms})


def decode_receive_request(topic: TopicId, data: bytes) -> ReceiveRequest:
    obj = loads_object(data, "receive request")
    return ReceiveRequest(
        topic,
        _int(obj.get("max", 1), "max", nullable=False) or 0,
        _int(obj.get("leaseMs"), "leaseMs"),
    )


def encode_queue_message(m: QueueMessage) -> dict[str, Any]:
    return {
        "id": m.id.hex(),
        "receipt": str(m.receipt),
        "payload": base64.b64encode(m.payload).decode(),
        "attempt": m.attempt,
        "enqueueTime": m.enqueued_ms,
        "due": m.due_ms,
        "priority": m.priority,
        "leaseExpires": m.lease_expires_ms,
        "key": m.key,
    }


def encode_receive_response(result: ReceiveResult) -> bytes:
    return _dumps(
        {
            "messages": [encode_queue_message(m) for m in result.messages],
            "nextDue": result.next_due_ms,
        }
    )


def decode_receive_response(data: bytes) -> ReceiveResult:
    obj = loads_object(data, "receive response")
    try:
        messages = tuple(
            QueueMessage(
                bytes.fromhex(m["id"]),
                base64.b64decode(m["payload"]),
                int(m["attempt"]),
                int(m["enqueueTime"]),
                int(m["due"]),
                int(m["priority"]),
                int(m["leaseExpires"]),
                m.get("key"),
            )
            for m in obj["messages"]
        )
        return ReceiveResult(messages, obj.get("nextDue"))
    except (KeyError, TypeError, ValueError) as exc:
        raise TmsCodecError(f"malformed receive response: {exc}") from exc


# -- ack, nack, settle ------------------------------------------------------------------


def _receipts(obj: dict[str, Any]) -> list[Receipt]:
    return [Receipt.parse(r) for r in _list(obj.get("receipts"), "receipts")]


def encode_ack_request(receipts: Sequence[Receipt], tx_write_pointer: int | None) -> bytes:
    return _dumps(
        {"receipts": [str(r) for r in receipts], "transactionWritePointer": tx_write_pointer}
    )


def decode_ack_request(topic: TopicId, data: bytes) -> AckRequest:
    obj = loads_object(data, "ack request")
    wp = _int(obj.get("transactionWritePointer"), "write pointer")
    return AckRequest(topic, _receipts(obj), wp)


def encode_nack_request(receipts: Sequence[Receipt], delay_ms: int | None) -> bytes:
    return _dumps({"receipts": [str(r) for r in receipts], "delayMs": delay_ms})


def decode_nack_request(topic: TopicId, data: bytes) -> NackRequest:
    obj = loads_object(data, "nack request")
    return NackRequest(topic, _receipts(obj), _int(obj.get("delayMs"), "delayMs"))


def encode_outcomes(outcomes: Sequence[AckOutcome]) -> bytes:
    return _dumps({"outcomes": [o.value for o in outcomes]})


def decode_outcomes(data: bytes) -> list[AckOutcome]:
    obj = loads_object(data, "ack response")
    try:
        return [AckOutcome(o) for o in obj["outcomes"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise TmsCodecError(f"malformed ack response: {exc}") from exc


def encode_settle_request(tx_write_pointer: int, commit: bool) -> bytes:
    return _dumps({"transactionWritePointer": tx_write_pointer, "commit": commit})


def decode_settle_request(topic: TopicId, data: bytes) -> SettleRequest:
    obj = loads_object(data, "settle request")
    commit = obj.get("commit")
    if not isinstance(commit, bool):
        raise TmsInvalidArgumentError("commit must be true or false")
    wp = _int(obj.get("transactionWritePointer"), "write pointer", nullable=False)
    assert wp is not None
    return SettleRequest(topic, wp, commit)


# -- stats ------------------------------------------------------------------------------


def encode_queue_stats(stats: QueueStats) -> bytes:
    return _dumps(
        {
            "pending": stats.pending,
            "scheduled": stats.scheduled,
            "ready": stats.ready,
            "leased": stats.leased,
            "acked": stats.acked,
            "dead": stats.dead,
            "oldestReadyTime": stats.oldest_ready_ms,
        }
    )


def decode_queue_stats(data: bytes) -> QueueStats:
    obj = loads_object(data, "queue stats")
    try:
        return QueueStats(
            int(obj["pending"]),
            int(obj["scheduled"]),
            int(obj["ready"]),
            int(obj["leased"]),
            int(obj["acked"]),
            int(obj["dead"]),
            obj["oldestReadyTime"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise TmsCodecError(f"malformed queue stats: {exc}") from exc
