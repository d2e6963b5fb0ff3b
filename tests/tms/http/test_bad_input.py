"""Every route, fed bad input: a clear status, a JSON error body, and nothing stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tms.http.conftest import Served
from tms.codec import avro
from tms.codec.avro import ConsumeSpec
from tms.http.app import HttpConfig
from tms.http.auth import Authorizer, Grant, Permission
from tms.model import TopicId

NS = "ns1"
AVRO = {"Content-Type": "avro/binary"}
JSON = {"Content-Type": "application/json"}
GOOD_PUBLISH = avro.encode_publish_request(None, [b"ok"])


def url(s: Served, topic: str = "t", action: str = "", ns: str = NS) -> str:
    return f"{s.url}/v1/namespaces/{ns}/topics/{topic}" + (f"/{action}" if action else "")


def poll_body(**kw: Any) -> bytes:
    return avro.encode_consume_request(ConsumeSpec(**kw))


CASES: list[tuple[str, Callable[[Served], Any], int, str]] = [
    # names
    ("bad topic name", lambda s: s.http.put(url(s, "bad.name")), 400, "invalid_argument"),
    ("bad namespace", lambda s: s.http.get(f"{s.url}/v1/namespaces/bad-ns/topics"), 400, "invalid_argument"),
    ("too long a name", lambda s: s.http.put(url(s, "x" * 300)), 400, "invalid_argument"),
    # topics
    ("unknown topic", lambda s: s.http.get(url(s, "nope")), 404, "topic_not_found"),
    ("duplicate topic", lambda s: s.http.put(url(s)), 409, "topic_exists"),
    ("properties not an object", lambda s: s.http.put(url(s, "t2"), data="[1]"), 400, "bad_encoding"),
    ("malformed JSON", lambda s: s.http.put(url(s, "t2"), data="{"), 400, "bad_encoding"),
    ("non-string property", lambda s: s.http.put(url(s, "t2"), data='{"ttl": [1]}'), 400, "invalid_argument"),
    ("negative ttl", lambda s: s.http.put(url(s, "t2"), data='{"ttl": "-5"}'), 400, "invalid_argument"),
    ("update unknown", lambda s: s.http.put(url(s, "nope", "properties"), data="{}"), 404, "topic_not_found"),
    ("delete unknown", lambda s: s.http.delete(url(s, "nope")), 404, "topic_not_found"),
    # publish
    ("wrong content type", lambda s: s.http.post(url(s, action="publish"), data=GOOD_PUBLISH), 400, "invalid_argument"),
    ("text content type", lambda s: s.http.post(url(s, action="publish"), data=b"x", headers={"Content-Type": "text/plain"}), 400, "invalid_argument"),
    ("malformed Avro", lambda s: s.http.post(url(s, action="publish"), data=b"\x05\x07", headers=AVRO), 400, "bad_encoding"),
    ("Avro with trailing bytes", lambda s: s.http.post(url(s, action="publish"), data=GOOD_PUBLISH + b"!", headers=AVRO), 400, "bad_encoding"),
    ("malformed JSON publish", lambda s: s.http.post(url(s, action="publish"), data=b"{x", headers=JSON), 400, "bad_encoding"),
    ("bad base64", lambda s: s.http.post(url(s, action="publish"), json={"messages": ["@@"]}), 400, "invalid_argument"),
    ("bad ttl", lambda s: s.http.post(url(s, action="publish"), json={"messages": [{"payload": "eA==", "ttl": 0}]}), 400, "invalid_argument"),
    ("empty non-tx publish", lambda s: s.http.post(url(s, action="publish"), data=avro.encode_publish_request(None, []), headers=AVRO), 400, "invalid_argument"),
    ("publish to unknown topic", lambda s: s.http.post(url(s, "nope", "publish"), data=GOOD_PUBLISH, headers=AVRO), 404, "topic_not_found"),
    ("negative write pointer", lambda s: s.http.post(url(s, action="publish"), data=avro.encode_publish_request(-5, [b"x"]), headers=AVRO), 400, "invalid_argument"),
    ("too large", lambda s: s.http.post(url(s, action="publish"), data=avro.encode_publish_request(None, [b"x" * 5000]), headers=AVRO), 413, "request_too_large"),
    # store and rollback
    ("non-tx store", lambda s: s.http.post(url(s, action="store"), data=GOOD_PUBLISH, headers=AVRO), 400, "invalid_argument"),
    ("malformed rollback token", lambda s: s.http.post(url(s, action="rollback"), data=b"\x01"), 400, "bad_encoding"),
    ("rollback token without pointer", lambda s: s.http.post(url(s, action="rollback"), data=b"\x02\x02\x02\x02\x02"), 400, "bad_encoding"),
    # poll
    ("zero limit", lambda s: s.http.post(url(s, action="poll"), data=poll_body(limit=0), headers=AVRO), 400, "invalid_argument"),
    ("negative limit", lambda s: s.http.post(url(s, action="poll"), json={"limit": -1}), 400, "invalid_argument"),
    ("negative start time", lambda s: s.http.post(url(s, action="poll"), data=poll_body(start_from=-1), headers=AVRO), 400, "invalid_argument"),
    ("short message id", lambda s: s.http.post(url(s, action="poll"), data=poll_body(start_from=b"\x00" * 19), headers=AVRO), 400, "invalid_argument"),
    ("bad hex id", lambda s: s.http.post(url(s, action="poll"), json={"startFrom": "zz"}), 400, "invalid_argument"),
    ("bad transaction", lambda s: s.http.post(url(s, action="poll"), data=poll_body(transaction=b"\x11"), headers=AVRO), 400, "bad_encoding"),
    ("bad wait", lambda s: s.http.post(url(s, action="poll"), json={}, params={"wait_ms": "soon"}), 400, "invalid_argument"),
    ("too long a wait", lambda s: s.http.post(url(s, action="poll"), json={}, params={"wait_ms": "999999"}), 400, "invalid_argument"),
    ("poll unknown topic", lambda s: s.http.post(url(s, "nope", "poll"), json={}), 404, "topic_not_found"),
    # markers and bounds
    ("markers in Avro", lambda s: s.http.post(url(s, action="markers"), data=b"\x02", headers=AVRO), 400, "invalid_argument"),
    ("markers not a list", lambda s: s.http.post(url(s, action="markers"), json={"transactionWritePointers": 5}), 400, "invalid_argument"),
    ("no markers", lambda s: s.http.post(url(s, action="markers"), json={"transactionWritePointers": []}), 400, "invalid_argument"),
    ("marker pointer not an int", lambda s: s.http.post(url(s, action="markers"), json={"transactionWritePointers": ["7"]}), 400, "invalid_argument"),
    ("marker pointer zero", lambda s: s.http.post(url(s, action="markers"), json={"transactionWritePointers": [7, 0]}), 400, "invalid_argument"),
    ("bad idempotency key", lambda s: s.http.post(url(s, action="markers"), json={"transactionWritePointers": [7], "idempotencyKey": "a b"}), 400, "invalid_argument"),
    ("markers to unknown topic", lambda s: s.http.post(url(s, "nope", "markers"), json={"transactionWritePointers": [7]}), 404, "topic_not_found"),
    ("bounds with a bad transaction", lambda s: s.http.post(url(s, action="bounds"), data=poll_body(transaction=b"\x11"), headers=AVRO), 400, "bad_encoding"),
    ("bounds of unknown topic", lambda s: s.http.post(url(s, "nope", "bounds"), json={}), 404, "topic_not_found"),
    # routing
    ("no such route", lambda s: s.http.get(f"{s.url}/v2/nothing"), 404, "not_found"),
    ("wrong method", lambda s: s.http.post(url(s)), 405, "method_not_allowed"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "call", "status", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(
    make_server: Any, name: str, call: Callable[[Served], Any], status: int, code: str
) -> None:
    served = make_server(HttpConfig(port=0, max_request_bytes=4096))
    served.http.put(url(served))
    served.http.post(url(served, action="publish"), data=GOOD_PUBLISH, headers=AVRO)
    before = served.service.fetch(TopicId(NS, "t")).messages
    topics_before = served.service.list_topics(NS)
    rows_before = every_row(served)

    response = call(served)

    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["error"] == code and body["message"]
    assert served.service.fetch(TopicId(NS, "t")).messages == before
    assert served.service.list_topics(NS) == topics_before
    assert every_row(served) == rows_before


def every_row(served: Served) -> list[list[tuple[bytes, bytes]]]:
    """Every row of every table."""
    t = served.tables
    stores = (t.messages.store, t.payloads.store, t.metadata.store, t.idempotency.store)
    return [list(store.scan()) for store in stores]


@pytest.fixture
def secured(make_server: Any, tmp_path: Path) -> Served:
    auth_file = tmp_path / "auth.toml"
    auth_file.write_text(
        """
[[tokens]]
token = "admin-token"
principal = "admin"

[[tokens]]
token = "reader-token"
principal = "reader"

[[grants]]
principal = "admin"
namespace = "*"
topic = "*"
permissions = ["read", "write", "admin"]

[[grants]]
principal = "reader"
namespace = "ns1"
topic = "t"
permissions = ["read"]
"""
    )
    served: Served = make_server(authorizer=Authorizer.from_file(auth_file))
    return served


def test_authentication_and_authorization(secured: Served) -> None:
    s = secured
    admin = {"Authorization": "Bearer admin-token"}
    reader = {"Authorization": "Bearer reader-token"}
    assert s.http.get(f"{s.url}/ping").status_code == 200  # no token needed
    r = s.http.put(url(s))
    assert r.status_code == 401 and r.json()["error"] == "unauthenticated"
    assert s.http.put(url(s), headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert s.http.put(url(s), headers=admin).status_code == 200
    r = s.http.post(url(s, action="publish"), data=GOOD_PUBLISH, headers={**AVRO, **reader})
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    assert (
        s.http.post(
            url(s, action="publish"), data=GOOD_PUBLISH, headers={**AVRO, **admin}
        ).status_code
        == 200
    )
    r = s.http.post(url(s, action="poll"), json={}, headers=reader)
    assert r.status_code == 200 and len(r.json()["messages"]) == 1
    assert s.http.put(url(s, "other"), headers=reader).status_code == 403
    assert s.http.get(url(s, "other"), headers=reader).status_code == 403


def test_grant_rules() -> None:
    grant = Grant("p", "ns", "*", frozenset({Permission.READ}))
    assert grant.allows("p", "ns", "any", Permission.READ)
    assert grant.allows("p", "ns", None, Permission.READ)
    assert not grant.allows("p", "ns", "any", Permission.WRITE)
    assert not grant.allows("q", "ns", "any", Permission.READ)
    topic_only = Grant("p", "*", "t", frozenset({Permission.READ}))
    assert topic_only.allows("p", "other", "t", Permission.READ)
    assert not topic_only.allows("p", "other", None, Permission.READ)  # listing needs topic "*"


def test_bad_auth_files(tmp_path: Path) -> None:
    from tms.errors import TmsInvalidArgumentError

    bad = tmp_path / "bad.toml"
    bad.write_text("[[tokens]]\nprincipal = 'x'\n")
    with pytest.raises(TmsInvalidArgumentError):
        Authorizer.from_file(bad)
    bad.write_text(
        "[[tokens]]\ntoken='t'\nprincipal='x'\n[[grants]]\nprincipal='x'\npermissions=['fly']\n"
    )
    with pytest.raises(TmsInvalidArgumentError):
        Authorizer.from_file(bad)
    with pytest.raises(TmsInvalidArgumentError):
        Authorizer.from_file(tmp_path / "missing.toml")
