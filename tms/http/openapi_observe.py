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
        },
    },
}

OBSERVE_PATHS: dict[str, Any] = {
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
