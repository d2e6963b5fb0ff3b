"""The OpenAPI document and docs/http.md describe exactly what the service does: every
route both ways, and every field of real JSON answers (and requests) declared."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from tests.tms.helpers import tx
from tests.tms.http.conftest import Served
from tms.codec import json as jsonc
from tms.codec.avro import ConsumeSpec
from tms.http.openapi import openapi_spec
from tms.http.routes import ROUTES
from tms.model import StoreRequest, TopicId
from txn.codec import encode_transaction

HTTP_MD = Path(__file__).parents[3] / "docs" / "http.md"
SPEC = openapi_spec()
SCHEMAS = SPEC["components"]["schemas"]


def undeclared(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Where ``value`` does not fit ``schema`` (the subset of OpenAPI 3.0 the document
    uses): fields not declared, required fields missing, wrong JSON types."""
    if "$ref" in schema:
        return undeclared(value, SCHEMAS[schema["$ref"].rsplit("/", 1)[1]], where)
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null not allowed"]
    if "oneOf" in schema:
        fits = [s for s in schema["oneOf"] if not undeclared(value, s, where)]
        return [] if fits else [f"{where}: fits no alternative"]
    kind = schema.get("type")
    types = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "boolean": bool,
    }
    if kind in types and not isinstance(value, types[kind]):
        return [f"{where}: not {kind}"]
    if kind == "integer" and isinstance(value, bool):
        return [f"{where}: not integer"]
    problems: list[str] = []
    if kind == "object":
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{where}.{name}: missing")
        for name, item in value.items():
            if name in props:
                problems += undeclared(item, props[name], f"{where}.{name}")
            elif isinstance(extra, dict):
                problems += undeclared(item, extra, f"{where}.{name}")
            else:
                problems.append(f"{where}.{name}: not declared")
    if kind == "array":
        for i, item in enumerate(value):
            problems += undeclared(item, schema.get("items", {}), f"{where}[{i}]")
    if kind == "string" and "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(f"{where}: does not match {schema['pattern']}")
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} not in {schema['enum']}")
    return problems


def operation(method: str, path: str) -> dict[str, Any]:
    op: dict[str, Any] = SPEC["paths"][path][method.lower()]
    return op


def response_schema(method: str, path: str, status: int = 200) -> dict[str, Any]:
    schema: dict[str, Any] = operation(method, path)["responses"][str(status)]["content"][
        "application/json"
    ]["schema"]
    return schema


def request_schema(method: str, path: str) -> dict[str, Any]:
    schema: dict[str, Any] = operation(method, path)["requestBody"]["content"]["application/json"][
        "schema"
    ]
    return schema


def test_every_route_is_documented_and_every_documented_operation_is_a_route(
    served: Served,
) -> None:
    documented = {(m.upper(), p) for p, ops in SPEC["paths"].items() for m in ops}
    served_routes = {
        (r.method, r.resource.canonical)
        for r in served.app.router.routes()
        if r.resource is not None
    }
    assert documented == served_routes
    for route in ROUTES:
        assert operation(route.method, route.path)["x-access"] == route.requirement


def test_the_served_document_is_this_one(served: Served) -> None:
    assert served.http.get(f"{served.url}/v1/openapi.json").json() == SPEC


def test_every_route_is_in_the_route_table_of_http_md() -> None:
    text = HTTP_MD.read_text()
    rows = set(re.findall(r"^\| `([A-Z]+) ([^`]+)` \|", text, re.MULTILINE))
    expected = set()
    for route in ROUTES:
        path = route.path.removeprefix("/v1/namespaces/{namespace}/")
        expected.add((route.method, path))
    assert {(m, re.split(r"[?[]", p)[0]) for m, p in rows} == expected


def test_every_field_of_the_document_is_in_http_md() -> None:
    text = HTTP_MD.read_text()
    missing = set()
    for name, schema in SCHEMAS.items():
        for field in _fields(schema):
            if not re.search(rf"\b{re.escape(field)}\b", text):
                missing.add(f"{name}.{field}")
    assert not missing


def _fields(schema: dict[str, Any]) -> list[str]:
    out = list(schema.get("properties", {}))
    for sub in schema.get("properties", {}).values():
        out += _fields(sub)
    for alternative in schema.get("oneOf", []):
        out += _fields(alternative)
    return out


TOPIC = "/v1/namespaces/{namespace}/topics/{topic}"


def test_real_json_answers_fit_their_schemas(served: Served) -> None:
    http, base = served.http, f"{served.url}/v1/namespaces/ns1/topics"
    t = TopicId("ns1", "t")
    checks: list[tuple[str, str, Any]] = []

    def check(method: str, path: str, response: Any) -> None:
        assert response.status_code == 200, response.text
        checks.append((method, path, response.json()))

    assert http.put(f"{base}/t", json={"ttl": "600", "owner": "me"}).status_code == 200
    check("GET", TOPIC, http.get(f"{base}/t"))
    check("GET", "/v1/namespaces/{namespace}/topics", http.get(base))
    publish = {"messages": ["aGk=", {"payload": "aGk=", "ttl": 60}]}
    assert not undeclared(publish, request_schema("POST", TOPIC + "/publish"))
    check("POST", TOPIC + "/publish", http.post(f"{base}/t/publish", json=publish))
    wp = served.clock.now_ms() * 1_000_000
    tx_publish = {"transactionWritePointer": wp, "messages": ["aGk="]}
    answer = http.post(f"{base}/t/publish", json=tx_publish)
    check("POST", TOPIC + "/publish", answer)
    check("POST", TOPIC + "/rollback", http.post(f"{base}/t/rollback", json=answer.json()))
    staged = wp + 1
    stored = http.post(
        f"{base}/t/store", json={"transactionWritePointer": staged, "messages": ["aGk="]}
    )
    assert stored.status_code == 200
    markers = {"transactionWritePointers": [staged], "idempotencyKey": "k-1"}
    assert not undeclared(markers, request_schema("POST", TOPIC + "/markers"))
    check("POST", TOPIC + "/markers", http.post(f"{base}/t/markers", json=markers))
    reader = tx(wp + 10, wp + 20, in_progress=(wp + 5,))
    served.service.publish(StoreRequest.of(t, ["held"], tx_write_pointer=wp + 5))
    consume = {
        "startFrom": None,
        "inclusive": True,
        "limit": 100,
        "transaction": base64.b64encode(encode_transaction(reader)).decode(),
    }
    assert not undeclared(consume, request_schema("POST", TOPIC + "/poll"))
    check("POST", TOPIC + "/poll", http.post(f"{base}/t/poll", json=consume))
    check("POST", TOPIC + "/bounds", http.post(f"{base}/t/bounds", json=consume))
    plain = jsonc.encode_consume_request(ConsumeSpec(start_from=0))
    check(
        "POST",
        TOPIC + "/bounds",
        http.post(f"{base}/t/bounds", data=plain, headers={"Content-Type": "application/json"}),
    )
    check("GET", TOPIC + "/inspect", http.get(f"{base}/t/inspect"))
    check("GET", TOPIC + "/stats", http.get(f"{base}/t/stats"))
    check(
        "GET", "/v1/namespaces/{namespace}/stats", http.get(f"{served.url}/v1/namespaces/ns1/stats")
    )
    check("GET", TOPIC + "/messages", http.get(f"{base}/t/messages", params={"limit": 3}))
    for path in ("/v1/transactions", "/v1/metrics/history", "/v1/console"):
        check("GET", path, http.get(f"{served.url}{path}"))
    check_subscriptions(served, check)
    # A queue's routes (docs/queues.md)
    assert http.put(f"{base}/q", json={"kind": "queue"}).status_code == 200
    enqueue = {"messages": [{"payload": "aGk=", "key": "k", "priority": 1}, {"payload": ""}]}
    assert not undeclared(enqueue, request_schema("POST", TOPIC + "/enqueue"))
    check("POST", TOPIC + "/enqueue", http.post(f"{base}/q/enqueue", json=enqueue))
    receive = {"max": 2, "leaseMs": 60_000}
    assert not undeclared(receive, request_schema("POST", TOPIC + "/receive"))
    received = http.post(f"{base}/q/receive", json=receive)
    check("POST", TOPIC + "/receive", received)
    first, second = (m["receipt"] for m in received.json()["messages"])
    check("POST", TOPIC + "/ack", http.post(f"{base}/q/ack", json={"receipts": [first]}))
    nack = {"receipts": [second], "delayMs": 10}
    check("POST", TOPIC + "/nack", http.post(f"{base}/q/nack", json=nack))
    settle = {"transactionWritePointer": wp + 30, "commit": False}
    check("POST", TOPIC + "/settle", http.post(f"{base}/q/settle", json=settle))
    check("GET", TOPIC + "/queue", http.get(f"{base}/q/queue"))
    check("GET", TOPIC + "/inspect", http.get(f"{base}/q/inspect"))

    assert {path for _m, path, _v in checks} >= {
        r.path for r in ROUTES if r.path.startswith("/v1/namespaces") and r.handler != "store"
    } - {TOPIC + "/properties"}  # (update and delete answer without a body)
    for method, path, value in checks:
        assert not undeclared(value, response_schema(method, path)), (path, value)


def check_subscriptions(served: Served, check: Any) -> None:
    """Every subscription route's JSON answer (and request), checked by ``check``."""
    http, base = served.http, f"{served.url}/v1/namespaces/ns1/topics/t"
    subs, one = TOPIC + "/subscriptions", TOPIC + "/subscriptions/{name}"
    wp = served.clock.now_ms() * 1_000_000 + 100
    served.service.publish(StoreRequest.of(TopicId("ns1", "t"), ["one"]))
    finished = {"transactionWritePointers": [wp]}
    assert not undeclared(finished, request_schema("POST", TOPIC + "/finished"))
    check("POST", TOPIC + "/finished", http.post(f"{base}/finished", json=finished))
    preferences = {"start": "earliest", "transactional": False, "filter": None}
    assert not undeclared(preferences, request_schema("PUT", one))
    check("PUT", one, http.put(f"{base}/subscriptions/s", json=preferences))
    check("GET", subs, http.get(f"{base}/subscriptions"))
    check("GET", one, http.get(f"{base}/subscriptions/s"))
    update = {"preferences": {"start": {"time": 0}}, "version": 1}
    assert not undeclared(update, request_schema("PUT", one + "/preferences"))
    check("PUT", one + "/preferences", http.put(f"{base}/subscriptions/s/preferences", json=update))
    polled = http.post(f"{base}/subscriptions/s/poll", json={"limit": 1})
    check("POST", one + "/poll", polled)
    commit = {"position": polled.json()["position"], "version": polled.json()["version"]}
    assert not undeclared(commit, request_schema("POST", one + "/commit"))
    committed = http.post(f"{base}/subscriptions/s/commit", json=commit)
    check("POST", one + "/commit", committed)
    writer = tx(wp, wp + 1)
    in_tx = {
        "position": commit["position"],
        "version": committed.json()["version"],
        "transaction": base64.b64encode(encode_transaction(writer)).decode(),
        "inTransaction": True,
    }
    check("POST", one + "/commit", http.post(f"{base}/subscriptions/s/commit", json=in_tx))
    rollback = {"transactionWritePointers": [wp]}
    assert not undeclared(rollback, request_schema("POST", one + "/rollback"))
    check("POST", one + "/rollback", http.post(f"{base}/subscriptions/s/rollback", json=rollback))
    seek = {"to": "latest", "version": committed.json()["version"]}
    assert not undeclared(seek, request_schema("POST", one + "/seek"))
    sought = http.post(f"{base}/subscriptions/s/seek", json=seek)
    check("POST", one + "/seek", sought)
    version = str(sought.json()["version"])
    check("DELETE", one, http.delete(f"{base}/subscriptions/s", params={"version": version}))


@pytest.mark.parametrize(
    ("call", "status"),
    [
        (lambda s: s.http.get(f"{s.url}/v1/namespaces/ns1/topics/nope"), 404),
        (lambda s: s.http.get(f"{s.url}/v1/namespaces/bad-ns/topics"), 400),
        (lambda s: s.http.post(f"{s.url}/v1/namespaces/ns1/topics/t/poll", data=b"{"), 400),
    ],
)
def test_errors_fit_the_error_schema(served: Served, call: Any, status: int) -> None:
    served.service.create_topic(TopicId("ns1", "t"))
    response = call(served)
    assert response.status_code == status
    assert not undeclared(response.json(), SCHEMAS["Error"])
    documented_codes = re.findall(r"`([a-z_]+)`", HTTP_MD.read_text().split("**Errors**")[1])
    assert response.json()["error"] in documented_codes
