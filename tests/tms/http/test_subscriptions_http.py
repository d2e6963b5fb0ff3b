"""The subscription routes over real HTTP: the record's life, 409 ``bad_version`` that
changes nothing, polls in both body formats with their position headers, commit riding
on a poll, positions in transactions, bad input, and access."""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.tms.helpers import tx
from tests.tms.http.conftest import Served
from tms.codec import avro
from tms.codec.avro import ConsumeSpec
from tms.http.auth import Authorizer, Grant, Permission
from tms.ids import MessageId
from tms.model import StoreRequest, TopicId
from txn.codec import encode_transaction

NS = "ns1"
T = TopicId(NS, "t")
BASE = f"/v1/namespaces/{NS}/topics/t/subscriptions"
EVERYTHING = ConsumeSpec()


def call(
    served: Served,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> Any:
    data = json.dumps(body) if body is not None else None
    sent = {"Content-Type": "application/json"} if data else {}
    return served.http.request(
        method, served.url + path, data=data, headers={**sent, **(headers or {})}, params=params
    )


def ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code


@pytest.fixture
def topic(served: Served) -> Served:
    served.service.create_topic(T)
    served.service.publish(StoreRequest.of(T, [b"a", b"b", b"c"]))
    return served


def poll(
    served: Served,
    name: str,
    fmt: str,
    spec: ConsumeSpec = EVERYTHING,
    params: dict[str, str] | None = None,
) -> tuple[list[bytes], Any]:
    if fmt == "avro":
        body, ctype = avro.encode_consume_request(spec), "avro/binary"
    else:
        start = spec.start_from.hex() if isinstance(spec.start_from, bytes) else spec.start_from
        tx_text = base64.b64encode(spec.transaction).decode() if spec.transaction else None
        body = json.dumps(
            {
                "startFrom": start,
                "inclusive": spec.inclusive,
                "limit": spec.limit,
                "transaction": tx_text,
            }
        ).encode()
        ctype = "application/json"
    r = served.http.post(
        f"{served.url}{BASE}/{name}/poll",
        data=body,
        headers={"Content-Type": ctype},
        params=params,
    )
    assert r.status_code == 200, r.text
    if fmt == "avro":
        return [m.payload for m in avro.decode_consume_response(r.content)], r
    obj = r.json()
    assert obj["position"] == r.headers["X-Tms-Position"]
    assert obj["version"] == int(r.headers["X-Tms-Version"])
    return [base64.b64decode(m["payload"]) for m in obj["messages"]], r


def test_a_subscriptions_life(topic: Served) -> None:
    created = ok(call(topic, "PUT", f"{BASE}/s", {"start": "earliest"}))
    assert created["version"] == 1 and created["lag"] == {"messages": 3, "exact": True}
    assert ok(call(topic, "GET", f"{BASE}/s"))["position"] == "00" * 20
    listed = ok(call(topic, "GET", BASE))
    assert [s["name"] for s in listed] == ["s"]
    updated = ok(
        call(
            topic,
            "PUT",
            f"{BASE}/s/preferences",
            {"preferences": {"start": "latest", "transactional": False}, "version": 1},
        )
    )
    assert updated["version"] == 2 and updated["preferences"]["start"] == "latest"
    error(call(topic, "DELETE", f"{BASE}/s", params={"version": "1"}), 409, "bad_version")
    assert ok(call(topic, "DELETE", f"{BASE}/s", params={"version": "2"})) == {}
    error(call(topic, "GET", f"{BASE}/s"), 404, "subscription_not_found")
    ok(call(topic, "PUT", f"{BASE}/s", {}))
    error(call(topic, "PUT", f"{BASE}/s", {}), 409, "subscription_exists")


@pytest.mark.parametrize("fmt", ["avro", "json"])
def test_poll_commit_and_resume(topic: Served, fmt: str) -> None:
    ok(call(topic, "PUT", f"{BASE}/s", {}))
    first, r = poll(topic, "s", fmt, ConsumeSpec(limit=2))
    assert first == [b"a", b"b"]
    position, version = r.headers["X-Tms-Position"], int(r.headers["X-Tms-Version"])
    assert r.headers["X-Tms-Start"] == "00" * 20
    # A poll moves nothing
    assert poll(topic, "s", fmt, ConsumeSpec(limit=2))[0] == [b"a", b"b"]
    committed = ok(
        call(topic, "POST", f"{BASE}/s/commit", {"position": position, "version": version})
    )
    assert committed["position"] == position and committed["version"] == version + 1
    rest, r = poll(topic, "s", fmt)
    assert rest == [b"c"]
    # A stale version: 409, and nothing changes
    error(
        call(
            topic,
            "POST",
            f"{BASE}/s/commit",
            {"position": r.headers["X-Tms-Position"], "version": version},
        ),
        409,
        "bad_version",
    )
    assert ok(call(topic, "GET", f"{BASE}/s"))["position"] == position
    # Backwards and past the end are refused
    error(
        call(topic, "POST", f"{BASE}/s/commit", {"position": "00" * 20, "version": version + 1}),
        400,
        "position_out_of_range",
    )
    error(
        call(
            topic,
            "POST",
            f"{BASE}/s/commit",
            {"position": MessageId(2**62, 0).hex, "version": version + 1},
        ),
        400,
        "position_out_of_range",
    )


def test_commit_rides_on_the_next_poll(topic: Served) -> None:
    ok(call(topic, "PUT", f"{BASE}/s", {}))
    _, r = poll(topic, "s", "avro", ConsumeSpec(limit=1))
    after_a = bytes.fromhex(r.headers["X-Tms-Position"])
    msgs, r = poll(
        topic,
        "s",
        "avro",
        ConsumeSpec(start_from=after_a, limit=1),
        params={"commit": r.headers["X-Tms-Version"]},
    )
    assert msgs == [b"b"] and r.headers["X-Tms-Version"] == "2"
    assert ok(call(topic, "GET", f"{BASE}/s"))["position"] == after_a.hex()
    # a stale version: the commit and the read are refused together
    r = topic.http.post(
        f"{topic.url}{BASE}/s/poll",
        params={"commit": "1"},
        data=avro.encode_consume_request(ConsumeSpec(start_from=after_a)),
        headers={"Content-Type": "avro/binary"},
    )
    error(r, 409, "bad_version")


def test_a_commit_riding_on_a_long_poll_is_made_once_while_it_waits(topic: Served) -> None:
    # Given a consumer that read everything and commits it on a poll that waits
    ok(call(topic, "PUT", f"{BASE}/s", {}))
    _, r = poll(topic, "s", "avro")
    end = bytes.fromhex(r.headers["X-Tms-Position"])
    waiting = ThreadPoolExecutor(1)
    answer = waiting.submit(
        poll,
        topic,
        "s",
        "avro",
        ConsumeSpec(start_from=end),
        {"commit": r.headers["X-Tms-Version"], "wait_ms": "20000"},
    )
    try:
        # When a message arrives while it waits (the poll reads again)
        wait_until_committed(topic, end)
        topic.service.publish(StoreRequest.of(T, [b"d"]))
        msgs, r = answer.result(timeout=30)
    finally:
        waiting.shutdown()
    # Then it answers the message, the position committed once (one version on)
    assert msgs == [b"d"] and r.headers["X-Tms-Version"] == "2"
    assert ok(call(topic, "GET", f"{BASE}/s"))["position"] == end.hex()


def wait_until_committed(served: Served, position: bytes) -> None:
    for _ in range(1000):
        if ok(call(served, "GET", f"{BASE}/s"))["position"] == position.hex():
            return
        time.sleep(0.01)
    raise AssertionError("the commit was not made")


def test_seek(topic: Served) -> None:
    ok(call(topic, "PUT", f"{BASE}/s", {"start": "latest"}))
    assert poll(topic, "s", "json")[0] == []
    moved = ok(call(topic, "POST", f"{BASE}/s/seek", {"to": "earliest", "version": 1}))
    assert moved["version"] == 2
    assert poll(topic, "s", "json")[0] == [b"a", b"b", b"c"]
    error(
        call(
            topic, "POST", f"{BASE}/s/seek", {"to": {"id": MessageId(2**62, 0).hex}, "version": 2}
        ),
        400,
        "position_out_of_range",
    )


def test_a_position_in_a_transaction_over_http(topic: Served) -> None:
    ok(call(topic, "PUT", f"{BASE}/s", {"transactional": True}))
    wp = topic.clock.now_ms() * 1_000_000
    reader = tx(wp - 1, wp)
    encoded = base64.b64encode(encode_transaction(reader)).decode()
    msgs, r = poll(topic, "s", "json", ConsumeSpec(limit=2, transaction=encode_transaction(reader)))
    assert msgs == [b"a", b"b"]
    body = {
        "position": r.headers["X-Tms-Position"],
        "version": 1,
        "transaction": encoded,
        "inTransaction": True,
    }
    answer = ok(call(topic, "POST", f"{BASE}/s/commit", body))
    assert answer == {"position": body["position"], "version": 1, "transactionWritePointer": wp}
    # the transaction sees its own position; the record does not move
    assert poll(topic, "s", "json", ConsumeSpec(transaction=encode_transaction(reader)))[0] == [
        b"c"
    ]
    assert ok(call(topic, "GET", f"{BASE}/s"))["version"] == 1
    rolled = ok(call(topic, "POST", f"{BASE}/s/rollback", {"transactionWritePointers": [wp]}))
    assert rolled == {"rolledBack": 1}
    assert poll(topic, "s", "json", ConsumeSpec(transaction=encode_transaction(reader)))[0] == [
        b"a",
        b"b",
        b"c",
    ]


@pytest.mark.parametrize(
    ("sent", "status", "code"),
    [
        (("PUT", f"{BASE}/bad:name", {}), 400, "invalid_argument"),
        (("PUT", f"{BASE}/s2", {"start": "tomorrow"}), 400, "invalid_argument"),
        (("PUT", "/v1/namespaces/ns1/topics/nope/subscriptions/s", {}), 404, "topic_not_found"),
        (("GET", f"{BASE}/nope"), 404, "subscription_not_found"),
        (("DELETE", f"{BASE}/s"), 400, "invalid_argument"),
        (("POST", f"{BASE}/s/commit", {"position": "zz", "version": 1}), 400, "invalid_argument"),
        (("POST", f"{BASE}/s/commit", {"version": 1}), 400, "invalid_argument"),
        (("POST", f"{BASE}/s/seek", {"version": 1}), 400, "invalid_argument"),
        (("POST", f"{BASE}/s/rollback", {"transactionWritePointers": []}), 400, "invalid_argument"),
        (("POST", f"{BASE}/s/poll", {"startFrom": 5}), 400, "invalid_argument"),
        (("POST", f"{BASE}/s/poll", {"limit": 0}), 400, "invalid_argument"),
        (("POST", f"{BASE}/s/poll", {"limit": 10001}), 400, "invalid_argument"),
        (
            (
                "POST",
                "/v1/namespaces/ns1/topics/t/finished",
                {"transactionWritePointers": ["x"]},
            ),
            400,
            "invalid_argument",
        ),
        (
            (
                "POST",
                "/v1/namespaces/ns1/topics/no/finished",
                {"transactionWritePointers": [1]},
            ),
            404,
            "topic_not_found",
        ),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(
    topic: Served, sent: tuple[str, str, Any], status: int, code: str
) -> None:
    ok(call(topic, "PUT", f"{BASE}/s", {}))
    error(call(topic, *sent), status, code)
    assert ok(call(topic, "GET", f"{BASE}/s"))["version"] == 1
    assert [s["name"] for s in ok(call(topic, "GET", BASE))] == ["s"]


def test_a_transactional_subscription_is_polled_with_a_transaction(topic: Served) -> None:
    ok(call(topic, "PUT", f"{BASE}/s", {"transactional": True}))
    error(call(topic, "POST", f"{BASE}/s/poll", {}), 400, "invalid_argument")


def test_access_reading_the_topic_is_what_subscriptions_need(make_server: Any) -> None:
    authorizer = Authorizer(
        {"r": "reader", "o": "other"},
        [
            Grant("reader", "ns1", "t", frozenset({Permission.READ})),
            Grant("other", "ns1", "u", frozenset(Permission)),
        ],
    )
    served: Served = make_server(authorizer=authorizer)
    served.service.create_topic(T)
    as_reader = {"Authorization": "Bearer r"}
    as_other = {"Authorization": "Bearer o"}
    assert call(served, "PUT", f"{BASE}/s", {}, headers=as_reader).status_code == 200
    assert call(served, "GET", f"{BASE}/s", headers=as_other).status_code == 403
    assert call(served, "PUT", f"{BASE}/x", {}, headers=as_other).status_code == 403
    assert call(served, "GET", f"{BASE}/s").status_code == 401
    finished = {"transactionWritePointers": [1]}
    assert (
        call(
            served, "POST", "/v1/namespaces/ns1/topics/t/finished", finished, headers=as_reader
        ).status_code
        == 403
    )  # it takes write
