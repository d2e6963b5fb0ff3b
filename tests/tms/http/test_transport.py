"""``tms.client.transport``: answers of any status, failures as ``TransportError``, the
environment's proxy settings applied as ``requests`` would."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tms.client.transport import Transport, TransportError


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with its request line and body, echoed as the body."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        status = 404 if "missing" in self.path else 200
        reply = self.requestline.encode() + b"|" + body
        self.send_response(status)
        self.send_header("Content-Length", str(len(reply)))
        self.send_header("X-Seen", self.headers.get("X-Extra", "-"))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = _answer  # noqa: N815 (http.server names)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_request_returns_any_status_with_body_and_headers(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    transport = Transport(server + "/base/", headers={"X-Extra": "default"})
    reply = transport.request(
        "POST", "/x", body=b"abc", params={"wait_ms": "5", "q": "a b"}, timeout_s=5
    )
    assert reply.status == 200
    assert reply.content == b"POST /base/x?wait_ms=5&q=a+b HTTP/1.1|abc"
    assert reply.headers["x-seen"] == "default"  # case-insensitive
    missing = transport.request("GET", "/missing", headers={"X-Extra": "call"}, timeout_s=5)
    assert (missing.status, missing.headers["X-Seen"]) == (404, "call")
    transport.close()


def test_connection_failure_is_a_transport_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    transport = Transport("http://127.0.0.1:1")
    with pytest.raises(TransportError, match=r"127\.0\.0\.1:1/ping"):
        transport.request("GET", "/ping", timeout_s=2)


def test_bad_base_url_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http"):
        Transport("ftp://example.org")


def test_proxy_from_the_environment(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The "proxy" is the recording server: a proxied request carries the absolute URL.
    monkeypatch.setenv("HTTP_PROXY", server)
    monkeypatch.setenv("http_proxy", server)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    reply = Transport("http://service.invalid:9/v1").request(
        "GET", "/ping", params={"a": "1"}, timeout_s=5
    )
    assert reply.content.startswith(b"GET http://service.invalid:9/v1/ping?a=1 HTTP/1.1")


def test_no_proxy_bypasses_the_proxy(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    reply = Transport(server).request("GET", "/ping", timeout_s=5)
    assert reply.content.startswith(b"GET /ping HTTP/1.1")
