"""JSON schemas of the REST API's bodies (the OpenAPI document's ``components``)."""

from __future__ import annotations

from typing import Any

__all__ = ["QUEUE_SCHEMAS", "SCHEMAS"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {
                "type": "string",
                "description": "machine-readable code (see docs/http.md, Errors)",
            },
            "message": {"type": "string", "description": "for people"},
        },
    },
    "TopicProperties": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "properties": {
            "ttl": {"type": "string", "description": "seconds, > 0"},
            "generation": {"type": "string", "readOnly": True},
        },
    },
    "OutMessage": {
        "oneOf": [
            {"type": "string", "format": "byte"},
            {
                "type": "object",
                "required": ["payload"],
                "properties": {
                    "payload": {"type": "string", "format": "byte"},
                    "ttl": {"type": "integer", "minimum": 1, "description": "seconds"},
                },
            },
        ]
    },
    "PublishRequest": {
        "type": "object",
        "properties": {
            "transactionWritePointer": {
                "type": "integer",
                "format": "int64",
                "nullable": True,
            },
            "messages": {"type": "array", "items": _ref("OutMessage")},
        },
    },
    "RollbackRange": {
        "type": "object",
        "required": [
            "startTimestamp",
            "startSequenceId",
            "endTimestamp",
            "endSequenceId",
        ],
        "properties": {
            "startTimestamp": {"type": "integer", "format": "int64"},
            "startSequenceId": {"type": "integer"},
            "endTimestamp": {"type": "integer", "format": "int64"},
            "endSequenceId": {"type": "integer"},
        },
    },
    "PublishResponse": {
        "type": "object",
        "description": (
            "transactional: the rollback token (transactionWritePointer and "
            "rollbackRange); JSON answers also say how many were published"
        ),
        "properties": {
            "transactionWritePointer": {"type": "integer", "format": "int64"},
            "rollbackRange": _ref("RollbackRange"),
            "published": {"type": "integer"},
        },
    },
    "RollbackResponse": {
        "type": "object",
        "required": ["rolledBack"],
        "properties": {
            "rolledBack": {
                "type": "integer",
                "description": "entries rolled back by this call (0 on a repeat)",
            }
        },
    },
    "InspectReport": {
        "type": "object",
        "required": ["generation", "deleted", "rows", "truncated"],
        "properties": {
            "generation": {
                "type": "integer",
                "description": "current generation (negative: deleted)",
            },
            "deleted": {"type": "boolean"},
            "rows": {"type": "array", "items": _ref("InspectRow")},
            "truncated": {
                "type": "boolean",
                "description": "more message rows than the limit",
            },
            "kind": {"type": "string", "enum": ["queue"], "description": "a queue's report"},
            "messages": {
                "type": "array",
                "items": _ref("QueueInspectRow"),
                "description": "a queue's messages (its rows is empty)",
            },
        },
    },
    "InspectRow": {
        "type": "object",
        "description": (
            "a message-table row, or after a commit marker the payload-table "
            "rows it references and its seal"
        ),
        "required": ["table", "generation"],
        "properties": {
            "table": {"type": "string", "enum": ["message", "payload"]},
            "generation": {"type": "integer"},
            "publish_ms": {"type": "integer", "format": "int64"},
            "write_ms": {"type": "integer", "format": "int64"},
            "seq": {"type": "integer"},
            "id": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
            "kind": {
                "type": "string",
                "enum": ["plain", "transactional", "reference"],
            },
            "tx_write_pointer": {
                "type": "integer",
                "format": "int64",
                "nullable": True,
            },
            "rolled_back": {"type": "boolean"},
            "payload_bytes": {"type": "integer", "nullable": True},
            "ttl_s": {"type": "integer", "nullable": True},
            "seal": {
                "type": "object",
                "description": "the commit marker that sealed the write pointer",
                "properties": {
                    "publish_ms": {"type": "integer", "format": "int64"},
                    "seq": {"type": "integer"},
                },
            },
        },
    },
    "MarkersRequest": {
        "type": "object",
        "required": ["transactionWritePointers"],
        "properties": {
            "transactionWritePointers": {
                "type": "array",
                "minItems": 1,
                "maxItems": 10000,
                "items": {"type": "integer", "format": "int64", "minimum": 1},
            },
            "idempotencyKey": {
                "type": "string",
                "pattern": "^[!-~]{1,200}$",
                "nullable": True,
                "description": (
                    "the request takes effect at most once per key (within the "
                    "topic's TTL); a repeat answers the first outcome"
                ),
            },
        },
    },
    "MarkersResponse": {
        "type": "object",
        "properties": {
            "markers": {"type": "array", "items": _ref("PublishResponse")},
            "duplicate": {"type": "boolean"},
        },
    },
    "Position": {
        "type": "object",
        "nullable": True,
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
            "publishTime": {"type": "integer", "format": "int64"},
            "sequenceId": {"type": "integer"},
        },
    },
    "Bounds": {
        "type": "object",
        "properties": {
            "first": _ref("Position"),
            "last": _ref("Position"),
            "held": _ref("Position"),
            "counted": {
                "description": "with a limit: the messages a read with it would return",
                "type": "integer",
                "nullable": True,
            },
            "afterLimit": {
                "description": (
                    "with a limit that was reached: where a read resumes past it (the entry, "
                    "or staged row of a commit marker, after the last message counted)"
                ),
                "type": "string",
                "pattern": "^[0-9a-f]{40}$",
                "nullable": True,
            },
        },
    },
    "ConsumeRequest": {
        "type": "object",
        "properties": {
            "startFrom": {
                "description": ("a message id (hex), a time in ms, or null for the oldest"),
                "oneOf": [
                    {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                    {"type": "integer"},
                ],
                "nullable": True,
            },
            "inclusive": {"type": "boolean", "default": True},
            "limit": {"type": "integer", "minimum": 1, "nullable": True},
            "transaction": {
                "type": "string",
                "format": "byte",
                "nullable": True,
                "description": "Tephra TransactionCodec bytes",
            },
        },
    },
    "ConsumeResponse": {
        "type": "object",
        "properties": {
            "messages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "payload": {"type": "string", "format": "byte"},
                        "publishTime": {"type": "integer", "format": "int64"},
                    },
                },
            },
            "held": {
                "type": "boolean",
                "description": (
                    "stopped at an uncommitted transaction: poll again with a newer one"
                ),
            },
        },
    },
}


def _object(description: str, **properties: Any) -> dict[str, Any]:
    return {"type": "object", "description": description, "properties": properties}


_INT = {"type": "integer"}
_RECEIPTS = {"type": "array", "items": {"type": "string", "description": "<id hex>.<attempt>"}}
_WP = {"type": "integer", "nullable": True}

QUEUE_SCHEMAS: dict[str, Any] = {
    "QueueInspectRow": _object(
        "A queue's message and its state (GET …/inspect of a queue)",
        id={"type": "string"},
        state={
            "type": "string",
            "enum": ["pending", "scheduled", "ready", "leased", "acked", "dead", "moving"],
        },
        attempts=_INT,
        priority=_INT,
        enqueueTime=_INT,
        due=_INT,
        leaseExpires=_WP,
        doneTime=_WP,
        transactionWritePointer=_WP,
        key={"type": "string", "nullable": True},
        payloadSize=_INT,
    ),
    "EnqueueRequest": _object(
        "Messages for a queue; with transactionWritePointer pending until it commits",
        transactionWritePointer=_WP,
        messages={
            "type": "array",
            "items": _object(
                "payload (base64) and optionally key, delayMs, at (ms), priority",
                payload={"type": "string", "format": "byte"},
                key={"type": "string"},
                delayMs=_INT,
                at=_INT,
                priority=_INT,
            ),
        },
    ),
    "EnqueueResponse": _object(
        "Each message's id (20 hex digits); duplicate: its key was already there",
        messages={
            "type": "array",
            "items": _object("", id={"type": "string"}, duplicate={"type": "boolean"}),
        },
    ),
    "ReceiveRequest": _object("How many to lease, for how long", max=_INT, leaseMs=_WP),
    "ReceiveResponse": _object(
        "Leased messages; nextDue: when one may next come due",
        messages={
            "type": "array",
            "items": _object(
                "A delivery",
                id={"type": "string"},
                receipt={"type": "string"},
                payload={"type": "string", "format": "byte"},
                attempt=_INT,
                enqueueTime=_INT,
                due=_INT,
                priority=_INT,
                leaseExpires=_INT,
                key={"type": "string", "nullable": True},
            ),
        },
        nextDue=_WP,
    ),
    "AckRequest": _object("Receipts to ack", receipts=_RECEIPTS, transactionWritePointer=_WP),
    "NackRequest": _object("Receipts to return", receipts=_RECEIPTS, delayMs=_WP),
    "AckResponse": _object(
        "One outcome per receipt",
        outcomes={
            "type": "array",
            "items": {
                "type": "string",
                "enum": ["acked", "pending", "returned", "dead", "lease_lost", "unknown"],
            },
        },
    ),
    "SettleRequest": _object(
        "A transaction's outcome", transactionWritePointer=_INT, commit={"type": "boolean"}
    ),
    "SettleResponse": _object("How many pending messages were settled", settled=_INT),
    "QueueStats": _object(
        "Messages per state",
        pending=_INT,
        scheduled=_INT,
        ready=_INT,
        leased=_INT,
        acked=_INT,
        dead=_INT,
        oldestReadyTime=_WP,
    ),
}
