"""CDAP's MessagingHttpServiceTest over real HTTP, in both body formats, plus long-poll,
held reads, chunked streaming, JSON shapes, metrics and the OpenAPI document."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest

from tests.tms.helpers import tx
from tests.tms.http.conftest import Served
from tms.codec import avro
from tms.codec import json as jsonc
from tms.codec.avro import ConsumeSpec
from tms.config import TmsConfig
from tms.http.app import HttpConfig
from tms.model import Message, StoreRequest, TopicId
from txn.codec import encode_transaction
from txn.transaction import Transaction

NS = "ns1"
FORMATS = ["avro", "json"]
EVERYTHING = ConsumeSpec()


class Wire:
    """Raw HTTP calls in one body format, no client library in between."""

    def __init__(self, served: Served, fmt: str) -> None:
        self.s = served
        self.fmt = fmt
        self.ctype = "avro/binary" if fmt == "avro" else "application/json"

    def url(self, topic: str, action: str = "") -> str:
        return f"{self.s.url}/v1/namespaces/{NS}/topics/{topic}" + (f"/{action}" if action else "")

    def create(self, topic: str, props: dict[str, str] | None = None) -> int:
        body = json.dumps(props) if props is not None else b""
        return self.s.http.put(self.url(topic), data=body).status_code

    def publish(self, topic: str, payloads: list[bytes], wp: int | None = None) -> Any:
        if self.fmt == "avro":
            body = avro.encode_publish_request(wp, payloads)
        else:
            body = jsonc.encode_publish_request(wp, payloads)
        r = self.s.http.post(
            self.url(topic, "publish"), data=body, headers={"Content-Type": self.ctype}
        )
        assert r.status_code == 200, r.text
        return r.content

    def store(self, topic: str, payloads: list[bytes], wp: int | None) -> Any:
        if self.fmt == "avro":
            body = avro.encode_publish_request(wp, payloads)
        else:
            body = jsonc.encode_publish_request(wp, payloads)
        return self.s.http.post(
            self.url(topic, "store"), data=body, headers={"Content-Type": self.ctype}
        )

    def rollback(self, topic: str, token: bytes) -> int:
        headers = {"Content-Type": self.ctype}
        return self.s.http.post(
            self.url(topic, "rollback"), data=token, headers=headers
        ).status_code

    def poll(
        self,
        topic: str,
        spec: ConsumeSpec = EVERYTHING,
        wait_ms: int = 0,
        timeout_s: float | None = None,
    ) -> tuple[list[Message], Any]:
        body = (
            avro.encode_consume_request(spec)
            if self.fmt == "avro"
            else jsonc.encode_consume_request(spec)
        )
        params = {"wait_ms": str(wait_ms)} if wait_ms else {}
        r = self.s.http.post(
            self.url(topic, "poll"),
            data=body,
            headers={"Content-Type": self.ctype},
            params=params,
            timeout=timeout_s,
        )
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith(self.ctype)
        if self.fmt == "avro":
            return avro.decode_consume_response(r.content), r
        data = r.json()
        msgs = [
            Message((bytes.fromhex(m["id"]), base64.b64decode(m["payload"])))
            for m in data["messages"]
        ]
        for m, raw in zip(msgs, data["messages"], strict=True):
            assert raw["publishTime"] == m.publish_ms
        return msgs, r


@pytest.fixture(params=FORMATS)
def wire(request: pytest.FixtureRequest, served: Served) -> Wire:
    return Wire(served, request.param)


def payloads(msgs: list[Message]) -> list[bytes]:
    return [m.payload for m in msgs]


def txbytes(t: Transaction) -> bytes:
    return encode_transaction(t)


def test_metadata_endpoints(wire: Wire) -> None:
    http = wire.s.http
    assert http.get(wire.url("t1")).status_code == 404
    assert wire.create("t1") == 200
    assert wire.create("t1") == 409
    assert http.get(wire.url("t1")).json() == {"generation": "1", "ttl": "604800"}
    assert http.put(wire.url("t1", "properties"), data=json.dumps({"ttl": "5"})).status_code == 200
    assert http.get(wire.url("t1")).json()["ttl"] == "5"
    assert wire.create("t2", {"ttl": "xyz"}) == 400
    assert wire.create("t2", {"ttl": "5"}) == 200
    assert http.get(f"{wire.s.url}/v1/namespaces/{NS}/topics").json() == ["t1", "t2"]
    assert http.delete(wire.url("t1")).status_code == 200
    assert http.delete(wire.url("t2")).status_code == 200
    assert http.delete(wire.url("t1")).status_code == 404
    assert http.put(wire.url("t1", "properties"), data="{}").status_code == 404
    assert http.get(f"{wire.s.url}/v1/namespaces/{NS}/topics").json() == []


def test_generations(wire: Wire) -> None:
    for i in range(1, 6):
        assert wire.create("t1", {"ttl": "100"}) == 200
        assert wire.s.http.get(wire.url("t1")).json() == {"generation": str(i), "ttl": "100"}
        assert wire.s.http.delete(wire.url("t1")).status_code == 200


def test_basic_pub_sub(wire: Wire) -> None:
    wire.create("t1")
    assert wire.publish("t1", [b"m0", b"m1"]) in (b"", b'{"published": 2}')
    wire.s.clock.advance(1)
    token = wire.publish("t1", [b"m2"], wp=1)
    assert token
    assert wire.rollback("t1", token) == 200
    msgs, _ = wire.poll("t1")
    assert payloads(msgs) == [b"m0", b"m1", b"m2"]
    reader = ConsumeSpec(start_from=0, transaction=txbytes(tx(3, 3, (), (2,))))
    assert payloads(wire.poll("t1", reader)[0]) == [b"m0", b"m1"]
    m1 = msgs[1][0]
    assert payloads(wire.poll("t1", ConsumeSpec(start_from=m1, inclusive=False))[0]) == [b"m2"]
    wire.s.clock.advance(1)
    wire.publish("t1", [b"m3"], wp=2)
    wire.publish("t1", [b"m4"])
    after_m1 = ConsumeSpec(start_from=m1, inclusive=False, transaction=txbytes(tx(3, 3, (), (2,))))
    held_msgs, held = wire.poll("t1", after_m1)
    assert held_msgs == [] and held.headers.get("X-Tms-Held") == "true"
    if wire.fmt == "json":
        assert held.json()["held"] is True
    skip_invalid = ConsumeSpec(
        start_from=m1, inclusive=False, transaction=txbytes(tx(3, 3, (2,), ()))
    )
    assert payloads(wire.poll("t1", skip_invalid)[0]) == [b"m4"]


def test_payload_table(wire: Wire) -> None:
    wire.create("t1")
    assert wire.store("t1", [], 1).status_code == 400
    assert wire.store("t1", [b"x"], None).status_code == 400
    for i in range(10):
        assert wire.store("t1", [f"{i}a".encode(), f"{i}b".encode()], 1).status_code == 200
    assert wire.poll("t1")[0] == []
    wire.publish("t1", [], wp=1)
    msgs, _ = wire.poll("t1")
    assert len(msgs) == 20
    assert len(wire.poll("t1", ConsumeSpec(start_from=msgs[10][0]))[0]) == 10
    assert len(wire.poll("t1", ConsumeSpec(start_from=msgs[11][0], inclusive=False))[0]) == 8
    assert wire.poll("t1", ConsumeSpec(start_from=msgs[-1][0], inclusive=False))[0] == []
    assert len(wire.poll("t1", ConsumeSpec(limit=6))[0]) == 6


def test_reuse_request_and_chunked_consume(wire: Wire) -> None:
    wire.create("t1")
    big = [bytes([65 + i]) * 64 for i in range(10)]  # each about half of the 128-byte chunk
    wire.publish("t1", big)
    wire.publish("t1", big)
    assert payloads(wire.poll("t1")[0]) == big + big


@pytest.mark.parametrize("fmt", FORMATS)
def test_poll_streams_more_than_one_storage_step(fmt: str, make_server: Any) -> None:
    # 3 messages per storage step: answers of 0-2 steps are one response, longer ones
    # are streamed; a transactional read still stops at the first entry it cannot see.
    wire = Wire(make_server(HttpConfig(port=0, chunk_bytes=40, chunk_messages=3)), fmt)
    wire.create("t1")
    first = [b"m%02d" % i for i in range(10)]
    wire.publish("t1", first)
    open_tx = tx(70, 71, in_progress=(60,))
    wire.publish("t1", [b"in-flight"], wp=60)
    wire.publish("t1", [b"after"])
    everything, response = wire.poll("t1")
    assert payloads(everything) == [*first, b"in-flight", b"after"]
    assert [m[0] for m in everything] == sorted(m[0] for m in everything)
    assert "X-Tms-Held" not in response.headers
    seen, response = wire.poll("t1", ConsumeSpec(transaction=txbytes(open_tx)))
    assert payloads(seen) == first
    if fmt == "json":
        assert response.json()["held"] is True
    for limit in (1, 2, 3, 4, 6, 7):
        assert payloads(wire.poll("t1", ConsumeSpec(limit=limit))[0]) == first[:limit]


def test_transaction_max_lifetime(wire: Wire, make_server: Any) -> None:
    wire.create("t1")
    stale = 1  # a write pointer from 1970
    body = (
        avro.encode_publish_request(stale, [b"x"])
        if wire.fmt == "avro"
        else jsonc.encode_publish_request(stale, [b"x"])
    )
    served = make_server(tms_config=TmsConfig(tx_max_lifetime_s=60))
    served.http.put(f"{served.url}/v1/namespaces/{NS}/topics/t1")
    r = served.http.post(
        f"{served.url}/v1/namespaces/{NS}/topics/t1/publish",
        data=body,
        headers={"Content-Type": wire.ctype},
    )
    assert r.status_code == 400 and r.json()["error"] == "transaction_too_old"


def test_long_poll_returns_as_soon_as_there_is_a_message(wire: Wire) -> None:
    # Given a poll that may wait a minute and a client that gives up after half of it
    wire.create("t1")
    timer = threading.Timer(
        0.2, lambda: wire.s.service.publish(StoreRequest.of(TopicId(NS, "t1"), ["late"]))
    )
    timer.start()
    # When a message arrives meanwhile, Then the poll answers with it (woken by the
    # publish: had it waited for its deadline, the client would have timed out)
    msgs, _ = wire.poll("t1", wait_ms=60_000, timeout_s=30)
    timer.join()
    assert payloads(msgs) == [b"late"]


def test_long_poll_times_out_empty(wire: Wire) -> None:
    wire.create("t1")
    msgs, _ = wire.poll("t1", wait_ms=100)
    assert msgs == []


def test_ping_metrics_openapi(served: Served) -> None:
    http = served.http
    r = http.get(f"{served.url}/ping")
    assert (r.status_code, r.text) == (200, "OK.\n")
    http.put(f"{served.url}/v1/namespaces/{NS}/topics/m")
    metrics = http.get(f"{served.url}/metrics").text
    assert (
        'tms_http_requests_total{method="PUT",route="/v1/namespaces/{namespace}/topics/{topic}",status="200"}'
        in metrics
    )
    spec = http.get(f"{served.url}/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    documented = {(path, method.upper()) for path, ops in spec["paths"].items() for method in ops}
    app_routes = {
        (route.resource.canonical, route.method)
        for route in served.app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    assert app_routes <= documented


def test_json_publish_with_per_message_ttl(served: Served) -> None:
    http = served.http
    http.put(f"{served.url}/v1/namespaces/{NS}/topics/t")
    body = {
        "messages": [
            {"payload": base64.b64encode(b"short").decode(), "ttl": 1},
            base64.b64encode(b"long").decode(),
        ]
    }
    r = http.post(f"{served.url}/v1/namespaces/{NS}/topics/t/publish", json=body)
    assert r.status_code == 200 and r.json() == {"published": 2}
    served.clock.advance(1500)
    r = http.post(f"{served.url}/v1/namespaces/{NS}/topics/t/poll", json={})
    assert [base64.b64decode(m["payload"]) for m in r.json()["messages"]] == [b"long"]


def test_json_rollback_token(served: Served) -> None:
    http = served.http
    http.put(f"{served.url}/v1/namespaces/{NS}/topics/t")
    body = {"transactionWritePointer": 5, "messages": [base64.b64encode(b"x").decode()]}
    token = http.post(f"{served.url}/v1/namespaces/{NS}/topics/t/publish", json=body).json()
    assert token["rollbackRange"]["startSequenceId"] == 0
    r = http.post(f"{served.url}/v1/namespaces/{NS}/topics/t/rollback", json=token)
    assert r.json() == {"rolledBack": 1}
    reader = base64.b64encode(txbytes(tx(10, 10))).decode()
    r = http.post(f"{served.url}/v1/namespaces/{NS}/topics/t/poll", json={"transaction": reader})
    assert r.json() == {"messages": [], "held": False}
