"""The Thrift server behind TLS with client certificates (``txn.rpc.tls``): our client and
Apache Thrift's own TLS socket get in with a certificate the configured CA signed; no
certificate, another CA's, or plain TCP do not; the CLI passes the options on. Throwaway
CAs made by ``trustme``; real server on loopback port 0."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSSLSocket, TTransport

from tests.integration.procs import ServerProcess
from tests.integration.test_thrift_wire import ApacheClient
from tests.txn.harness import TxSystem, in_process_system
from txms_common.retry import RetryNTimes
from txn.cli import main as txn_main
from txn.config import ServerConfig
from txn.errors import InvalidArgumentError, TxServiceError, TxServiceUnavailableError
from txn.rpc.client import ThriftTxClient
from txn.rpc.server import ServerThread, new_server
from txn.rpc.tls import ClientTls


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_cert: Path
    other_key: Path

    def client(self, *, cert: bool = True) -> ClientTls:
        if not cert:
            return ClientTls(ca_file=str(self.ca))
        return ClientTls(str(self.ca), str(self.client_cert), str(self.client_key))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example.org")
    stranger = other.issue_cert("stranger@example.org")
    paths = {}
    for name, blob in {
        "ca": ca.cert_pem,
        "server_cert": server.cert_chain_pems[0],
        "server_key": server.private_key_pem,
        "client_cert": client.cert_chain_pems[0],
        "client_key": client.private_key_pem,
        "other_ca": other.cert_pem,
        "other_cert": stranger.cert_chain_pems[0],
        "other_key": stranger.private_key_pem,
    }.items():
        paths[name] = root / f"{name}.pem"
        blob.write_to_path(str(paths[name]))
    return Pki(**paths)


@pytest.fixture
def secured(pki: Pki) -> Iterator[tuple[TxSystem, tuple[str, int]]]:
    config = ServerConfig(
        port=0,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        tls_client_ca=str(pki.ca),
    )
    with in_process_system() as s:
        thread = ServerThread(new_server(s.manager, config))
        address = thread.start()
        try:
            yield s, address
        finally:
            thread.stop()


def test_a_client_with_a_certificate_of_the_ca_works(
    pki: Pki, secured: tuple[TxSystem, tuple[str, int]]
) -> None:
    _s, address = secured
    with ThriftTxClient(address, retry=RetryNTimes(1), tls=pki.client()) as client:
        tx = client.start_short()
        client.can_commit_or_throw(tx, [b"k"])
        client.commit_or_throw(tx)
        assert client.status() == "OK"


def test_apache_thrifts_tls_socket_works(
    pki: Pki, secured: tuple[TxSystem, tuple[str, int]]
) -> None:
    _s, address = secured
    sock = TSSLSocket.TSSLSocket(
        host=address[0],
        port=address[1],
        ca_certs=str(pki.ca),
        certfile=str(pki.client_cert),
        keyfile=str(pki.client_key),
    )
    apache = ApacheClient.__new__(ApacheClient)
    apache.transport = TTransport.TFramedTransport(sock)
    apache.proto = TBinaryProtocol.TBinaryProtocol(apache.transport)
    apache.transport.open()
    apache.seqid = 0
    try:
        assert apache.call("status", []) == {0: b"OK"}
    finally:
        apache.close()


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate", "plain TCP"])
def test_others_are_refused_and_the_server_goes_on(
    pki: Pki, secured: tuple[TxSystem, tuple[str, int]], who: str
) -> None:
    _s, address = secured
    if who == "no certificate":
        tls: ClientTls | None = pki.client(cert=False)
    elif who == "another CA's certificate":
        tls = ClientTls(str(pki.ca), str(pki.other_cert), str(pki.other_key))
    else:
        tls = None
    with (
        pytest.raises(TxServiceUnavailableError),
        ThriftTxClient(address, retry=RetryNTimes(1), timeout_s=5, tls=tls) as client,
    ):
        client.status()
    with ThriftTxClient(address, retry=RetryNTimes(1), tls=pki.client()) as client:
        assert client.status() == "OK"


def test_a_server_certificate_that_does_not_verify_is_not_retried(
    pki: Pki, secured: tuple[TxSystem, tuple[str, int]]
) -> None:
    _s, address = secured
    wrong = ClientTls(str(pki.other_ca), str(pki.client_cert), str(pki.client_key))
    with (
        pytest.raises(TxServiceError, match="failed TLS verification"),
        ThriftTxClient(address, retry=RetryNTimes(5), tls=wrong) as client,
    ):
        client.status()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        ServerConfig(tls_cert="cert.pem")
    with pytest.raises(InvalidArgumentError):
        ServerConfig(tls_client_ca="ca.pem")
    with pytest.raises(InvalidArgumentError):
        ClientTls(cert_file="c.pem")
    with pytest.raises(InvalidArgumentError, match="cannot load"):
        ClientTls(ca_file="/nonexistent/ca.pem").context()


def test_txn_serve_and_the_admin_commands_take_the_options(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ServerProcess(
        None,
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca),
    )  # fmt: skip
    try:
        host, port = server.start()
        where = f"{host}:{port}"
        tls = ["--tls-ca", str(pki.ca)]
        mine = [*tls, "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]
        assert txn_main(["status", "--server", where, *mine]) == 0
        assert capsys.readouterr().out.splitlines()[0].split() == ["status", "OK"]
        assert txn_main(["status", "--server", where, *tls]) == 1  # no client certificate
        assert txn_main(["status", "--server", where]) == 1  # plain TCP
        assert server.terminate() == 0
    finally:
        server.kill()
