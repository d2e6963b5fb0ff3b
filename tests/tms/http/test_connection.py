"""The connection level, from a raw socket: what aiohttp answers by itself is the
documented JSON too, and slow or idle clients are cut off after the configured timeouts."""

from __future__ import annotations

import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.tms.http.conftest import Served
from tms.http.app import HttpConfig
from tms.http.auth import Authorizer, Grant, Permission
from tms.model import StoreRequest, TopicId

WAIT_S = 30.0  # far beyond every timeout below: only a server that never acts fails


def connect(served: Served) -> socket.socket:
    parts = urlsplit(served.url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.settimeout(WAIT_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def answers(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP answers in ``data`` (Content-Length framed), in order."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        length = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:length]))
        data = rest[length:]
    return out


def one_answer(served: Served, raw: bytes) -> tuple[int, dict[str, Any]]:
    with connect(served) as sock:
        sock.sendall(raw)
        [(status, headers, body)] = answers(read_until_closed(sock))
    assert headers["content-type"].startswith("application/json"), headers
    return status, json.loads(body)


LONG = b"a" * 9000
GET_PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n"
PARSER_CASES = [
    ("over-long request line", b"GET /" + LONG + b" HTTP/1.1\r\n\r\n", 400, "bad_request"),
    ("over-long header", GET_PING + b"X-Big: " + LONG + b"\r\n\r\n", 400, "bad_request"),
    ("not HTTP", b"HELLO THERE\r\n\r\n", 400, "bad_request"),
    ("bad header line", GET_PING + b"no colon here\r\n\r\n", 400, "bad_request"),
    ("unknown Expect", GET_PING + b"Expect: magic\r\nConnection: close\r\n\r\n", 417, "expectation_failed"),  # noqa: E501
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "raw", "status", "code"), PARSER_CASES, ids=[c[0] for c in PARSER_CASES]
)
def test_errors_aiohttp_answers_itself_are_json(
    served: Served, name: str, raw: bytes, status: int, code: str
) -> None:
    got_status, body = one_answer(served, raw)
    assert (got_status, body["error"]) == (status, code)
    assert body["message"]
    if status == 400 and "long" in name:
        assert "8190 bytes" in body["message"]


@pytest.fixture
def secured(make_server: Any) -> Served:
    admin = Grant("root", "*", "*", frozenset(Permission))
    served: Served = make_server(authorizer=Authorizer({"good": "root"}, [admin]))
    return served


@pytest.mark.parametrize(
    "token", [b"\xff\xfe\xfd", "gëheim".encode("latin-1"), b"good\xc3", b"\x80"]
)
def test_an_authorization_header_that_is_not_utf8_is_401(secured: Served, token: bytes) -> None:
    raw = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token
    status, body = one_answer(secured, raw + b"\r\nConnection: close\r\n\r\n")
    assert (status, body["error"]) == (401, "unauthenticated")


def test_half_a_request_line_is_answered_408_and_closed_after_the_header_timeout(
    make_server: Any,
) -> None:
    # Given a server whose idle timeout is far away and header timeout near
    served = make_server(HttpConfig(port=0, header_timeout_s=0.3, idle_timeout_s=3600))
    with connect(served) as sock:
        # When a client sends half a request line and stops
        sock.sendall(b"GET /v1/namesp")
        # Then the server answers 408 and closes the connection (not after an hour)
        [(status, headers, body)] = answers(read_until_closed(sock))
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"] == "request_timeout"


def test_headers_trickling_in_count_from_the_first_byte(make_server: Any) -> None:
    served = make_server(HttpConfig(port=0, header_timeout_s=0.3, idle_timeout_s=3600))
    with connect(served) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\n")
        sock.settimeout(0.1)
        data = b""
        for _ in range(int(WAIT_S / 0.1)):  # a header line at a time, until answered
            try:
                data = sock.recv(65536)
                break
            except TimeoutError:
                sock.sendall(b"X-Slow: 1\r\n")
        sock.settimeout(WAIT_S)
        data += read_until_closed(sock)
    assert answers(data)[0][0] == 408


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    make_server: Any,
) -> None:
    served = make_server(HttpConfig(port=0, idle_timeout_s=0.3, header_timeout_s=3600))
    with connect(served) as sock:
        # Given a connection that made one request and kept the connection open
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        # When it sends nothing more, Then the server closes it (no second answer)
        [(status, _headers, body)] = answers(read_until_closed(sock))
    assert (status, body) == (200, b"OK.\n")


def test_a_connection_that_never_sends_is_closed_after_the_idle_timeout(
    make_server: Any,
) -> None:
    served = make_server(HttpConfig(port=0, idle_timeout_s=0.3, header_timeout_s=3600))
    with connect(served) as sock:
        assert read_until_closed(sock) == b""


def test_a_long_poll_outlives_the_idle_timeout(make_server: Any) -> None:
    # A request in progress is not idle: a poll waiting longer than the idle timeout
    # gets its answer, and the message published meanwhile.
    served = make_server(HttpConfig(port=0, idle_timeout_s=0.2, header_timeout_s=0.2))
    topic = TopicId("ns", "t")
    served.service.create_topic(topic)
    body = b"{}"
    request = (
        b"POST /v1/namespaces/ns/topics/t/poll?wait_ms=30000 HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    with connect(served) as sock:
        sock.sendall(request)
        with pytest.raises(TimeoutError):  # still open well past the idle timeout
            sock.settimeout(1.0)
            sock.recv(1, socket.MSG_PEEK)
        sock.settimeout(WAIT_S)
        served.service.publish(StoreRequest.of(topic, ["late"]))
        [(status, _headers, answer)] = answers(read_until_closed(sock))
    assert status == 200 and len(json.loads(answer)["messages"]) == 1


def test_the_408_close_lingers_so_a_client_still_sending_is_not_reset(make_server: Any) -> None:
    served = make_server(HttpConfig(port=0, header_timeout_s=0.3, idle_timeout_s=3600))
    with connect(served) as sock:
        # Given a client whose request timed out and who has read the 408 and the end
        sock.sendall(b"GET /ping HTTP/1.1\r\n")
        assert answers(read_until_closed(sock))[0][0] == 408
        # When it goes on sending (a slow client still writing its headers)
        # Then the server reads and drops it instead of resetting the connection, which
        # could destroy an unread 408 on the client's side
        for _ in range(5):
            sock.sendall(b"X-Late: " + b"x" * 10_000 + b"\r\n")
            time.sleep(0.05)
