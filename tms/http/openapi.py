"""The OpenAPI 3.0 description of the REST API, served at ``/v1/openapi.json``.

The paths are the routes of ``tms.http.routes.ROUTES`` (a test checks both ways), and each
operation's ``x-access`` says what a caller needs when the service runs with
authentication, taken from the same table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tms.http.openapi_observe import OBSERVE_PATHS, OBSERVE_SCHEMAS
from tms.http.openapi_subs import SUBSCRIPTION_PATHS, SUBSCRIPTION_SCHEMAS
from tms.http.routes import ROUTES, Route, Scope
from tms.http.schemas import QUEUE_SCHEMAS, SCHEMAS

__all__ = ["openapi_spec"]

_AVRO_BODY = {"schema": {"type": "string", "format": "binary"}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _body(json_schema: str, avro_record: str | None, required: bool = True) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": _ref(json_schema)}}
    if avro_record is not None:
        content["avro/binary"] = {
            **_AVRO_BODY,
            "description": f"Avro binary of the v1 {avro_record} schema",
        }
    return {"required": required, "content": content}


def _errors(*codes: int) -> dict[str, Any]:
    texts = {
        400: "Bad request (names, bodies, content type, limits)",
        401: "Missing or invalid bearer token",
        403: "Not permitted",
        404: "Topic (or route) not found",
        408: "The request line and headers did not arrive in time",
        409: (
            "Conflict: the topic exists (create); the write pointer is not a transaction "
            "in progress, or a rollback's transaction is committed "
            "(transaction_not_in_progress)"
        ),
        413: "Request body too large",
        503: (
            "Storage unavailable (storage_unavailable: retry; a write's outcome is "
            "unknown), or the transaction service cannot be asked about a transactional "
            "write (transaction_service_unavailable)"
        ),
    }
    return {
        str(c): {
            "description": texts[c],
            "content": {"application/json": {"schema": _ref("Error")}},
        }
        for c in codes
    }


_PARAMS = [
    {
        "name": "namespace",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[a-zA-Z0-9_]+$"},
    },
]
_TOPIC_PARAMS = [
    *_PARAMS,
    {
        "name": "topic",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[a-zA-Z0-9_-]+$"},
    },
]


def openapi_spec(routes: Iterable[Route] = ROUTES) -> dict[str, Any]:
    """The document, with the access rule of each of ``routes`` filled in."""
    spec = _spec()
    for route in routes:
        operation = spec["paths"].get(route.path, {}).get(route.method.lower())
        if operation is not None:
            operation["x-access"] = route.requirement
            if route.scope is Scope.PUBLIC:
                operation["security"] = [{}]
    return spec


_QUEUE_OPS = {
    "enqueue": ("Enqueue messages (a queue topic)", "EnqueueRequest", "EnqueueResponse"),
    "receive": (
        "Lease due messages; ?wait_ms=N waits up to N ms for one",
        "ReceiveRequest",
        "ReceiveResponse",
    ),
    "ack": ("Finish deliveries (at commit, with a write pointer)", "AckRequest", "AckResponse"),
    "nack": ("Return deliveries to the queue", "NackRequest", "AckResponse"),
    "settle": (
        "Settle a transaction's pending enqueues and acks (after commit, or instead of it)",
        "SettleRequest",
        "SettleResponse",
    ),
}


def _queue_paths() -> dict[str, Any]:
    """The queue routes (``tms.http.queues``); bodies are JSON only."""
    base = "/v1/namespaces/{namespace}/topics/{topic}/"
    paths: dict[str, Any] = {}
    for action, (summary, request, response) in _QUEUE_OPS.items():
        params = list(_TOPIC_PARAMS)
        if action == "receive":
            params.append({"name": "wait_ms", "in": "query", "schema": {"type": "integer"}})
        paths[base + action] = {
            "post": {
                "summary": summary,
                "operationId": f"queue{action.capitalize()}",
                "parameters": params,
                "requestBody": _body(request, None),
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {"application/json": {"schema": _ref(response)}},
                    },
                    **_errors(400, 401, 403, 404, 409, 413, 503),
                },
            }
        }
    paths[base + "queue"] = {
        "get": {
            "summary": "A queue's messages per state, and its oldest ready message",
            "operationId": "queueStats",
            "parameters": _TOPIC_PARAMS,
            "responses": {
                "200": {
                    "description": "Counts",
                    "content": {"application/json": {"schema": _ref("QueueStats")}},
                },
                **_errors(400, 401, 403, 404, 503),
            },
        }
    }
    return paths


def _spec() -> dict[str, Any]:
    ok = {"description": "OK"}
    topic_ops: dict[str, Any] = {
        "put": {
            "summary": "Create a topic",
            "operationId": "createTopic",
            "parameters": _TOPIC_PARAMS,
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": _ref("TopicProperties")}},
            },
            "responses": {"200": ok, **_errors(400, 401, 403, 409, 413, 503)},
        },
        "get": {
            "summary": "Get a topic's properties",
            "operationId": "getTopic",
            "parameters": _TOPIC_PARAMS,
            "responses": {
                "200": {
                    "description": "Properties",
                    "content": {"application/json": {"schema": _ref("TopicProperties")}},
                },
                **_errors(400, 401, 403, 404, 503),
            },
        },
        "delete": {
            "summary": "Delete a topic (its data becomes invisible at once)",
            "operationId": "deleteTopic",
            "parameters": _TOPIC_PARAMS,
            "responses": {"200": ok, **_errors(400, 401, 403, 404, 503)},
        },
    }
    publish_response = {
        "description": (
            "Published. Avro: empty for a non-transactional publish, else the rollback "
            "token (a PublishResponse) to send back to rollback"
        ),
        "content": {
            "application/json": {"schema": _ref("PublishResponse")},
            "avro/binary": _AVRO_BODY,
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "txms messaging",
            "version": "1",
            "description": (
                "Transactional messaging: topics, publishing, rollback and polling. Bodies "
                "are avro/binary (CDAP's v1 schemas) or application/json; bytes in JSON are "
                "base64; message ids are 40 hex digits."
            ),
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {**SCHEMAS, **OBSERVE_SCHEMAS, **SUBSCRIPTION_SCHEMAS, **QUEUE_SCHEMAS},
        },
        "security": [{}, {"bearer": []}],
        "paths": {
            **OBSERVE_PATHS,
            **SUBSCRIPTION_PATHS,
            **_queue_paths(),
            "/v1/namespaces/{namespace}/topics": {
                "get": {
                    "summary": "List the topics of a namespace",
                    "operationId": "listTopics",
                    "parameters": _PARAMS,
                    "responses": {
                        "200": {
                            "description": "Topic names",
                            "content": {
                                "application/json": {
                                    "schema": {"type": "array", "items": {"type": "string"}}
                                }
                            },
                        },
                        **_errors(400, 401, 403, 503),
                    },
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}": topic_ops,
            "/v1/namespaces/{namespace}/topics/{topic}/properties": {
                "put": {
                    "summary": "Replace a topic's properties",
                    "operationId": "updateTopic",
                    "parameters": _TOPIC_PARAMS,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("TopicProperties")}},
                    },
                    "responses": {"200": ok, **_errors(400, 401, 403, 404, 413, 503)},
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}/publish": {
                "post": {
                    "summary": "Publish messages (or a commit marker: transactional, no messages)",
                    "operationId": "publish",
                    "parameters": _TOPIC_PARAMS,
                    "requestBody": _body("PublishRequest", "PublishRequest"),
                    "responses": {
                        "200": publish_response,
                        **_errors(400, 401, 403, 404, 409, 413, 503),
                    },
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}/store": {
                "post": {
                    "summary": "Stage transactional payloads for a later commit marker",
                    "operationId": "store",
                    "parameters": _TOPIC_PARAMS,
                    "requestBody": _body("PublishRequest", "PublishRequest"),
                    "responses": {"200": ok, **_errors(400, 401, 403, 404, 409, 413, 503)},
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}/rollback": {
                "post": {
                    "summary": "Roll back a transactional publish (send its response back)",
                    "operationId": "rollback",
                    "parameters": _TOPIC_PARAMS,
                    "requestBody": _body("PublishResponse", "PublishResponse"),
                    "responses": {
                        "200": {
                            "description": "Rolled back (idempotent). Avro: empty",
                            "content": {"application/json": {"schema": _ref("RollbackResponse")}},
                        },
                        **_errors(400, 401, 403, 404, 409, 413, 503),
                    },
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}/poll": {
                "post": {
                    "summary": "Read messages",
                    "operationId": "poll",
                    "parameters": [
                        *_TOPIC_PARAMS,
                        {
                            "name": "wait_ms",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 0, "maximum": 60000},
                            "description": (
                                "wait up to this long for new messages when there are none"
                            ),
                        },
                    ],
                    "requestBody": _body("ConsumeRequest", "ConsumeRequest"),
                    "responses": {
                        "200": {
                            "description": (
                                "Messages, streamed. Header X-Tms-Held: true when the "
                                "read stopped at an uncommitted transaction"
                            ),
                            "content": {
                                "application/json": {"schema": _ref("ConsumeResponse")},
                                "avro/binary": _AVRO_BODY,
                            },
                        },
                        **_errors(400, 401, 403, 404, 413, 503),
                    },
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}/markers": {
                "post": {
                    "summary": (
                        "Publish the commit markers of several write pointers at once: all or "
                        "none, next to each other, in order"
                    ),
                    "operationId": "publishMarkers",
                    "parameters": _TOPIC_PARAMS,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("MarkersRequest")}},
                    },
                    "responses": {
                        "200": {
                            "description": "Where each marker landed (rollback tokens)",
                            "content": {"application/json": {"schema": _ref("MarkersResponse")}},
                        },
                        **_errors(400, 401, 403, 404, 409, 413, 503),
                    },
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}/bounds": {
                "post": {
                    "summary": (
                        "Where a read would start and stop (message-table positions), "
                        "reading no payloads: for planning parallel reads of one snapshot"
                    ),
                    "operationId": "bounds",
                    "parameters": _TOPIC_PARAMS,
                    "requestBody": _body("ConsumeRequest", "ConsumeRequest"),
                    "responses": {
                        "200": {
                            "description": (
                                "first and last entry the read passes; held: where a "
                                "transactional read stops"
                            ),
                            "content": {"application/json": {"schema": _ref("Bounds")}},
                        },
                        **_errors(400, 401, 403, 404, 413, 503),
                    },
                }
            },
            "/v1/namespaces/{namespace}/topics/{topic}/inspect": {
                "get": {
                    "summary": "Raw rows of a topic (the table debugger); consumes nothing",
                    "operationId": "inspect",
                    "parameters": [
                        *_TOPIC_PARAMS,
                        {
                            "name": "start_ms",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                        {"name": "end_ms", "in": "query", "schema": {"type": "integer"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "Rows",
                            "content": {"application/json": {"schema": _ref("InspectReport")}},
                        },
                        **_errors(400, 401, 403, 404, 503),
                    },
                }
            },
            "/ping": {
                "get": {
                    "summary": "Liveness (no authentication)",
                    "operationId": "ping",
                    "responses": {
                        "200": {
                            "description": "OK.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics of every topic",
                    "operationId": "metrics",
                    "responses": {
                        "200": {
                            "description": "Prometheus text format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        **_errors(401, 403),
                    },
                }
            },
            "/v1/cluster": {
                "get": {
                    "summary": "The cluster: this instance, the live ones, the topics' owners",
                    "operationId": "cluster",
                    "responses": {
                        "200": {
                            "description": "mode 'standalone', or 'cluster' with self, "
                            "instances [{id, url}] and owners {ns.topic: id}",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        **_errors(401),
                    },
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "operationId": "openapi",
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.0",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        **_errors(401),
                    },
                }
            },
        },
    }
