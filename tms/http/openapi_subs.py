"""The OpenAPI description of the subscription routes (``tms.http.subscriptions``) and of
``finished``: their paths and body schemas, merged into the document by
``tms.http.openapi``."""

from __future__ import annotations

from typing import Any

__all__ = ["SUBSCRIPTION_PATHS", "SUBSCRIPTION_SCHEMAS"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def _errors(*codes: int) -> dict[str, Any]:
    texts = {
        400: (
            "Bad request (names, bodies, a transactional subscription read without a "
            "transaction); position_out_of_range: a commit moving backwards or past what "
            "could be read, a seek past the end"
        ),
        401: "Missing or invalid bearer token",
        403: "Not permitted",
        404: "Topic or subscription not found (topic_not_found, subscription_not_found)",
        409: (
            "Conflict: subscription_exists (create); bad_version: the version sent is not "
            "the current one (read again); transaction_not_in_progress (a commit in a "
            "transaction that is not in progress, a rollback of a committed one)"
        ),
        413: "Request body too large",
        503: "Storage or transaction service unavailable",
    }
    return {str(c): _json(texts[c], _ref("Error")) for c in codes}


def _path(name: str, pattern: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": pattern},
    }


_PARAMS = [
    _path("namespace", "^[a-zA-Z0-9_]+$"),
    _path("topic", "^[a-zA-Z0-9_-]+$"),
]
_SUB_PARAMS = [*_PARAMS, _path("name", "^[a-zA-Z0-9_-]+$")]
_INT64 = {"type": "integer", "format": "int64"}
_ID = {"type": "string", "pattern": "^[0-9a-f]{40}$"}
_B64 = {"type": "string", "format": "byte"}
_POINTERS = {
    "type": "object",
    "required": ["transactionWritePointers"],
    "properties": {
        "transactionWritePointers": {"type": "array", "items": _INT64, "minItems": 1},
    },
}

SUBSCRIPTION_SCHEMAS: dict[str, Any] = {
    "Start": {
        "oneOf": [
            {"type": "string", "enum": ["earliest", "latest"]},
            {"type": "object", "required": ["time"], "properties": {"time": _INT64}},
            {"type": "object", "required": ["id"], "properties": {"id": _ID}},
        ],
        "description": "earliest, latest, the first message at or after a time (ms), an id",
    },
    "Preferences": {
        "type": "object",
        "properties": {
            "start": _ref("Start"),
            "transactional": {"type": "boolean"},
            "filter": {
                "type": "object",
                "nullable": True,
                "required": ["payloadPrefixes"],
                "properties": {
                    "payloadPrefixes": {"type": "array", "items": _B64, "minItems": 1},
                },
            },
        },
    },
    "Subscription": {
        "type": "object",
        "required": ["namespace", "topic", "name", "version", "position", "preferences"],
        "properties": {
            "namespace": {"type": "string"},
            "topic": {"type": "string"},
            "name": {"type": "string"},
            "version": {**_INT64, "description": "send it back with the next update"},
            "position": {**_ID, "description": "where the next read starts"},
            "committedBy": {
                **_INT64,
                "nullable": True,
                "description": "the write pointer of the transaction that committed it",
            },
            "updated": {**_INT64, "description": "when the position or record last changed"},
            "generation": {"type": "integer"},
            "preferences": _ref("Preferences"),
            "lag": {
                "type": "object",
                "nullable": True,
                "properties": {
                    "messages": _INT64,
                    "exact": {"type": "boolean", "description": "false: estimated"},
                },
            },
        },
    },
    "PreferencesUpdate": {
        "type": "object",
        "required": ["preferences", "version"],
        "properties": {"preferences": _ref("Preferences"), "version": _INT64},
    },
    "CommitRequest": {
        "type": "object",
        "required": ["position", "version"],
        "properties": {
            "position": _ID,
            "version": _INT64,
            "transaction": {**_B64, "nullable": True},
            "inTransaction": {"type": "boolean"},
        },
    },
    "CommitResponse": {
        "oneOf": [
            _ref("Subscription"),
            {
                "type": "object",
                "required": ["position", "version", "transactionWritePointer"],
                "properties": {
                    "position": _ID,
                    "version": _INT64,
                    "transactionWritePointer": _INT64,
                },
            },
        ]
    },
    "SeekRequest": {
        "type": "object",
        "required": ["to", "version"],
        "properties": {
            "to": _ref("Start"),
            "version": _INT64,
            "transaction": {**_B64, "nullable": True},
        },
    },
    "SubscriptionPollResponse": {
        "type": "object",
        "properties": {
            "messages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": _ID, "payload": _B64, "publishTime": _INT64},
                },
            },
            "held": {"type": "boolean"},
            "heldFinished": {"type": "boolean"},
            "fresh": {"type": "boolean"},
            "position": _ID,
            "version": _INT64,
            "durableVersion": {
                **_INT64,
                "description": "the version known durable when answered (commit_later)",
            },
            "readError": {
                "type": "object",
                "description": "the read failed after the commit riding on it was written",
                "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "WritePointers": _POINTERS,
    "PositionsRolledBack": {"type": "object", "properties": {"rolledBack": {"type": "integer"}}},
    "Empty": {"type": "object", "properties": {}},
}

_SUB = "/v1/namespaces/{namespace}/topics/{topic}/subscriptions/{name}"
_ONE = _json("The subscription", _ref("Subscription"))

SUBSCRIPTION_PATHS: dict[str, Any] = {
    "/v1/namespaces/{namespace}/topics/{topic}/subscriptions": {
        "get": {
            "summary": "The topic's subscriptions, with their lag",
            "operationId": "listSubscriptions",
            "parameters": _PARAMS,
            "responses": {
                "200": _json("By name", {"type": "array", "items": _ref("Subscription")}),
                **_errors(400, 401, 403, 404, 503),
            },
        }
    },
    _SUB: {
        "put": {
            "summary": "Create a subscription",
            "operationId": "createSubscription",
            "parameters": _SUB_PARAMS,
            "requestBody": {**_body("Preferences"), "required": False},
            "responses": {"200": _ONE, **_errors(400, 401, 403, 404, 409, 413, 503)},
        },
        "get": {
            "summary": "A subscription: its position, version, preferences and lag",
            "operationId": "getSubscription",
            "parameters": _SUB_PARAMS,
            "responses": {"200": _ONE, **_errors(400, 401, 403, 404, 503)},
        },
        "delete": {
            "summary": "Delete a subscription (with the version last read)",
            "operationId": "deleteSubscription",
            "parameters": [
                *_SUB_PARAMS,
                {"name": "version", "in": "query", "required": True, "schema": _INT64},
            ],
            "responses": {
                "200": _json("Deleted", _ref("Empty")),
                **_errors(400, 401, 403, 404, 409, 503),
            },
        },
    },
    _SUB + "/preferences": {
        "put": {
            "summary": "Replace a subscription's preferences",
            "operationId": "updateSubscription",
            "parameters": _SUB_PARAMS,
            "requestBody": _body("PreferencesUpdate"),
            "responses": {"200": _ONE, **_errors(400, 401, 403, 404, 409, 413, 503)},
        }
    },
    _SUB + "/poll": {
        "post": {
            "summary": "Read from the subscription's position (moves nothing)",
            "operationId": "pollSubscription",
            "parameters": [
                *_SUB_PARAMS,
                {
                    "name": "wait_ms",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 0, "maximum": 60000},
                },
                {
                    "name": "commit",
                    "in": "query",
                    "required": False,
                    "schema": _INT64,
                    "description": "commit startFrom with this version before reading",
                },
                {
                    "name": "reread",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "boolean"},
                    "description": (
                        "when the transaction the poll is held behind finishes, read what "
                        "finished and answer it (X-Tms-Fresh)"
                    ),
                },
                {
                    "name": "commit_later",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "boolean"},
                    "description": (
                        "answer before the commit (?commit) is durable; X-Tms-Durable-Version "
                        "says which version was durable then"
                    ),
                },
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": _ref("ConsumeRequest")},
                    "avro/binary": {"schema": {"type": "string", "format": "binary"}},
                },
            },
            "responses": {
                "200": {
                    "description": (
                        "Messages. Headers X-Tms-Start, X-Tms-Position (the next read's start), "
                        "X-Tms-Version, X-Tms-Durable-Version (the version known durable), "
                        "X-Tms-Held, X-Tms-Held-Finished, X-Tms-Fresh; "
                        "X-Tms-Read-Error, X-Tms-Read-Error-Message: the read failed after "
                        "the commit (?commit) was written: no messages, the commit answered"
                    ),
                    "content": {
                        "application/json": {"schema": _ref("SubscriptionPollResponse")},
                        "avro/binary": {"schema": {"type": "string", "format": "binary"}},
                    },
                },
                **_errors(400, 401, 403, 404, 409, 413, 503),
            },
        }
    },
    _SUB + "/commit": {
        "post": {
            "summary": "Commit a position, or write it as part of a transaction",
            "operationId": "commitSubscription",
            "parameters": _SUB_PARAMS,
            "requestBody": _body("CommitRequest"),
            "responses": {
                "200": _json("Committed", _ref("CommitResponse")),
                **_errors(400, 401, 403, 404, 409, 413, 503),
            },
        }
    },
    _SUB + "/seek": {
        "post": {
            "summary": "Move the position (backwards too)",
            "operationId": "seekSubscription",
            "parameters": _SUB_PARAMS,
            "requestBody": _body("SeekRequest"),
            "responses": {"200": _ONE, **_errors(400, 401, 403, 404, 409, 413, 503)},
        }
    },
    _SUB + "/rollback": {
        "post": {
            "summary": "Remove positions written in transactions that did not commit",
            "operationId": "rollbackSubscription",
            "parameters": _SUB_PARAMS,
            "requestBody": _body("WritePointers"),
            "responses": {
                "200": _json("Rolled back (idempotent)", _ref("PositionsRolledBack")),
                **_errors(400, 401, 403, 404, 409, 413, 503),
            },
        }
    },
    "/v1/namespaces/{namespace}/topics/{topic}/finished": {
        "post": {
            "summary": (
                "Say that transactions which wrote to the topic finished (wakes readers "
                "held behind them)"
            ),
            "operationId": "transactionsFinished",
            "parameters": _PARAMS,
            "requestBody": _body("WritePointers"),
            "responses": {
                "200": _json("Noted", _ref("Empty")),
                **_errors(400, 401, 403, 404, 413),
            },
        }
    },
}
