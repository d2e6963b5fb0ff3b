"""HTTPS: the service with a certificate from a throwaway CA, the client verifying it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.tls import Pki, make_pki
from tests.tms.http.conftest import Served
from tms.cli import main
from tms.client import MessagingClient
from tms.errors import ServiceUnavailableError, TmsInvalidArgumentError
from tms.http.app import HttpConfig
from tms.http.server import HttpServer, HttpServerThread, server_ssl_context
from tms.model import TopicId
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore

T = TopicId("ns", "t")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def https(make_server: Any, pki: Pki) -> Served:
    config = HttpConfig(port=0, tls_cert_file=str(pki.cert_file), tls_key_file=str(pki.key_file))
    served: Served = make_server(config)
    served.service.create_topic(T)
    return served


def test_the_client_verifies_the_service_against_the_given_ca(https: Served, pki: Pki) -> None:
    assert https.url.startswith("https://")
    with MessagingClient(https.url, ca_bundle=pki.ca_file) as client:
        client.publish(T, [b"secret"])
        assert [m.payload for m in client.poll(T).messages] == [b"secret"]


def test_the_ca_bundle_may_come_from_the_environment(
    https: Served, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca_file))
    with MessagingClient(https.url) as client:
        assert client.list_topics("ns") == ["t"]


def test_a_certificate_the_client_does_not_trust_is_refused(
    https: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    other_ca = make_pki(tmp_path / "other").ca_file
    for client in (
        MessagingClient(https.url, retries=0),  # the system's trust store
        MessagingClient(https.url, retries=0, ca_bundle=other_ca),
    ):
        with client, pytest.raises(ServiceUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            client.list_topics("ns")
    assert https.service.fetch(T).messages == []


def test_a_certificate_for_another_host_is_refused(make_server: Any, tmp_path: Path) -> None:
    elsewhere = make_pki(tmp_path, host="db.example.org")
    config = HttpConfig(
        port=0, tls_cert_file=str(elsewhere.cert_file), tls_key_file=str(elsewhere.key_file)
    )
    served = make_server(config)
    with (
        MessagingClient(served.url, retries=0, ca_bundle=elsewhere.ca_file) as client,
        pytest.raises(ServiceUnavailableError, match="CERTIFICATE_VERIFY_FAILED") as refused,
    ):
        client.list_topics("ns")
    assert "match" in str(refused.value)  # the name, not the signature


def test_plain_http_to_the_https_port_gets_no_answer(https: Served) -> None:
    with (
        MessagingClient(https.url.replace("https", "http"), retries=0, timeout_s=10) as client,
        pytest.raises(ServiceUnavailableError),
    ):
        client.list_topics("ns")


def test_the_cli_takes_a_ca_bundle(
    https: Served, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--url", https.url, "--ca-bundle", str(pki.ca_file), "topics", "list", "ns"]) == 0
    assert capsys.readouterr().out == "TOPIC\nt\n"
    assert main(["--url", https.url, "--ca-bundle", "/nonexistent.pem", "topics", "list", "ns"])
    assert capsys.readouterr().err.count("\n") == 1


def test_a_certificate_or_key_that_does_not_load_is_a_clear_error(pki: Pki, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    for cert, key in ((bad, None), (pki.cert_file, bad), (tmp_path / "missing.pem", None)):
        config = HttpConfig(tls_cert_file=str(cert), tls_key_file=str(key) if key else None)
        with pytest.raises(TmsInvalidArgumentError, match="cannot load the TLS certificate"):
            server_ssl_context(config)
    with pytest.raises(TmsInvalidArgumentError, match="needs its certificate"):
        HttpConfig(tls_key_file=str(pki.key_file))


def test_the_server_stops_with_an_idle_client_connected(pki: Pki, tmp_path: Path) -> None:
    # Given a keep-alive TLS connection the client leaves idle (it never answers the
    # server's close_notify)
    config = HttpConfig(port=0, tls_cert_file=str(pki.cert_file), tls_key_file=str(pki.key_file))
    service = MessagingService(LevelDBStore(tmp_path / "db"))
    thread = HttpServerThread(HttpServer(service, config))
    url = thread.start()
    client = MessagingClient(url, ca_bundle=pki.ca_file)
    try:
        client.create_topic(T)
        # When the server stops, Then it does (it used to wait for the peer for ever)
        stopper = threading.Thread(target=thread.stop, daemon=True)
        stopper.start()
        stopper.join(timeout=120)
        assert not stopper.is_alive(), "the server did not stop"
    finally:
        client.close()
        service.close()
