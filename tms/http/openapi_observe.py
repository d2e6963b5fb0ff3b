"""The OpenAPI description of the observing routes (``tms.http.observe``): their paths
and body schemas, merged into the document by ``tms.http.openapi``."""

from __future__ import annotations

from typing import Any

__all__ = ["OBSERVE_PATHS", "OBSERVE_SCHEMAS"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    texts = {
        400: "Bad request (names, limits)",
        401: "Missing or invalid bearer token",
        403: "Not permitted",
        404: "Topic (or route) not found",
        503: "Storage unavailable",
    }
    return {str(c): _json(texts[c], _ref("Error")) for c in codes}


_NS = {
    "name": "namespace",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[a-zA-Z0-9_]+$"},
}
_TOPIC = {
    "name": "topic",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[a-zA-Z0-9_-]+$"},
}
_INT64 = {"type": "integer", "format": "int64"}
_TIME = {**_INT64, "nullable": True, "description": "milliseconds since the epoch"}

OBSERVE_SCHEMAS: dict[str, Any] = {
    "TopicStats": {
        "type": "object",
        "required": ["namespace", "topic", "messages", "payloadBytes", "exact"],
        "properties": {
            "namespace": {"type": "string"},
            "topic": {"type": "string"},
            "ttl": {"type": "integer", "description": "seconds"},
            "generation": {"type": "integer"},
            "messages": {**_INT64, "description": "stored messages (estimate unless exact)"},
            "payloadBytes": {**_INT64, "description": "their payload bytes (same)"},
            "exact": {
                "type": "boolean",
                "description": "false: messages and payloadBytes are estimates (a large topic)",
            },
            "diskBytes": {**_INT64, "description": "LevelDB's estimate of the bytes on disk"},
            "firstPublishTime": _TIME,
            "lastPublishTime": _TIME,
            "publishRate": {"type": "number", "description": "messages per second, last minute"},
            "subscriptions": {"type": "integer", "description": "how many the topic has"},
            "maxLag": {
                **_INT64,
                "nullable": True,
                "description": "the largest lag of its subscriptions (null: none)",
            },
        },
    },
}

_NUMBER = {"type": "number"}
_MS = {"type": "number", "nullable": True, "description": "milliseconds"}
OBSERVE_SCHEMAS.update(
    {
        "RecentMessage": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                "publishTime": _INT64,
                "sequenceId": {"type": "integer"},
                "txWritePointer": {
                    **_INT64,
                    "nullable": True,
                    "description": "as stored: negative once rolled back",
                },
                "status": {
                    "type": "string",
                    "enum": [
                        "plain",
                        "committed",
                        "in progress",
                        "rolled back",
                        "invalid",
                        "unknown",
                    ],
                },
                "kind": {"type": "string", "enum": ["plain", "transactional", "reference"]},
                "size": {"type": "integer", "description": "payload bytes"},
                "payload": {"type": "string", "format": "byte", "description": "its start"},
                "truncated": {"type": "boolean"},
            },
        },
        "RecentMessages": {
            "type": "object",
            "properties": {
                "messages": {"type": "array", "items": _ref("RecentMessage")},
                "more": {"type": "boolean"},
                "judged": {"type": "string", "enum": ["fresh", "none", "unavailable"]},
                "snapshot": {
                    "type": "object",
                    "nullable": True,
                    "properties": {
                        "readPointer": _INT64,
                        "inProgress": {"type": "integer"},
                        "invalid": {"type": "integer"},
                    },
                },
            },
        },
        "TransactionState": {
            "type": "object",
            "properties": {
                "manager": {"type": "string", "nullable": True},
                "time": _INT64,
                "readPointer": _INT64,
                "writePointer": _INT64,
                "inProgress": {"type": "integer"},
                "oldestInProgressTime": _TIME,
                "invalid": {"type": "integer"},
                "history": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "time": _INT64,
                            "invalid": {"type": "integer"},
                            "inProgress": {"type": "integer"},
                        },
                    },
                },
                "lastPrune": {
                    "type": "object",
                    "nullable": True,
                    "properties": {
                        "time": _INT64,
                        "removed": {"type": "integer"},
                        "maxRemoved": {**_INT64, "nullable": True},
                    },
                },
                "pruneKnown": {"type": "boolean"},
            },
        },
        "MetricsHistory": {
            "type": "object",
            "properties": {
                "intervalSeconds": _NUMBER,
                "points": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "time": _INT64,
                            "publishRate": _NUMBER,
                            "publishBytesRate": _NUMBER,
                            "fetchRate": _NUMBER,
                            "fetchBytesRate": _NUMBER,
                            "requestRate": _NUMBER,
                            "errorRate": _NUMBER,
                            "httpP50Ms": _MS,
                            "httpP99Ms": _MS,
                            "publishP50Ms": _MS,
                            "publishP99Ms": _MS,
                            "queueLength": _NUMBER,
                        },
                    },
                },
            },
        },
        "ConsoleInfo": {
            "type": "object",
            "properties": {
                "version": {"type": "string"},
                "authentication": {"type": "boolean"},
                "principal": {"type": "string", "nullable": True},
                "grants": {
                    "type": "array",
                    "nullable": True,
                    "items": {
                        "type": "object",
                        "properties": {
                            "namespace": {"type": "string"},
                            "topic": {"type": "string"},
                            "permissions": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
                "namespaces": {"type": "array", "items": {"type": "string"}},
                "metrics": {"type": "boolean", "description": "may read metrics"},
                "features": {"type": "object", "additionalProperties": {"type": "boolean"}},
            },
        },
    }
)


def _static(summary: str, content_type: str = "text/html") -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "operationId": "console" + summary.split(maxsplit=1)[0].capitalize(),
            "responses": {
                "200": {
                    "description": "the file",
                    "content": {content_type: {"schema": {"type": "string"}}},
                },
                "404": _json("No such file", _ref("Error")),
            },
        }
    }


_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}

OBSERVE_PATHS: dict[str, Any] = {
    "/v1/namespaces/{namespace}/topics/{topic}/messages": {
        "get": {
            "summary": (
                "The newest messages, newest first, each with its transactional status "
                "against a fresh transaction (the table debugger); consumes nothing"
            ),
            "operationId": "recentMessages",
            "parameters": [
                _NS,
                _TOPIC,
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                },
                {
                    "name": "before",
                    "in": "query",
                    "schema": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                    "description": "only messages with smaller ids (the next page)",
                },
            ],
            "responses": {
                "200": _json("Messages", _ref("RecentMessages")),
                **_errors(400, 401, 403, 404, 503),
            },
        }
    },
    "/v1/transactions": {
        "get": {
            "summary": "The transaction manager as a fresh transaction sees it, and its trend",
            "operationId": "transactions",
            "responses": {
                "200": _json("State ({manager: null} when not known)", _ref("TransactionState")),
                **_errors(401, 403, 503),
            },
        }
    },
    "/v1/metrics/history": {
        "get": {
            "summary": "Rates and latencies over the last minutes, from the metrics",
            "operationId": "metricsHistory",
            "responses": {
                "200": _json("Points, oldest first", _ref("MetricsHistory")),
                **_errors(401, 403),
            },
        }
    },
    "/v1/console": {
        "get": {
            "summary": "Who the caller is, what they may do, and what the service offers",
            "operationId": "consoleInfo",
            "responses": {
                "200": _json("For the console", _ref("ConsoleInfo")),
                **_errors(401),
            },
        }
    },
    "/ui": {
        "get": {
            **_static("Redirect to /ui/")["get"],
            "responses": {"302": {"description": "to /ui/"}},
        }
    },
    "/ui/": _static("Page of the operations console"),
    "/ui/{name}": {
        "get": {**_static("File of the console", "text/javascript")["get"], "parameters": [_NAME]}
    },
    "/ui/vendor/{name}": {
        "get": {**_static("Vendored library", "text/javascript")["get"], "parameters": [_NAME]}
    },
    "/v1/namespaces/{namespace}/topics/{topic}/stats": {
        "get": {
            "summary": "What a topic holds: messages, bytes, first/last publish, publish rate",
            "operationId": "topicStats",
            "parameters": [_NS, _TOPIC],
            "responses": {
                "200": _json("Stats", _ref("TopicStats")),
                **_errors(400, 401, 403, 404, 503),
            },
        }
    },
    "/v1/namespaces/{namespace}/stats": {
        "get": {
            "summary": "The stats of every topic of a namespace",
            "operationId": "namespaceStats",
            "parameters": [_NS],
            "responses": {
                "200": _json("Stats per topic", {"type": "array", "items": _ref("TopicStats")}),
                **_errors(400, 401, 403, 503),
            },
        }
    },
}
