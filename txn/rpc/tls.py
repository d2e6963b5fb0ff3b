"""TLS for the Thrift transport, with client certificates as the authentication.

Tephra's protocol has no authentication message, so a shared secret could only be sent
in band by a new call that Tephra's clients do not make. Instead the server can run
behind TLS (``tls_cert``, ``tls_key``) and *require* a client certificate signed by a
given CA (``tls_client_ca``): the connection is authenticated before the first frame, for
every method, by any Thrift client with a TLS socket (Apache Thrift's generated clients
have ``TSSLSocket`` / ``TSSLTransportFactory``; ``ThriftTxClient`` takes ``ClientTls``).
This is how ZooKeeper, etcd and Kafka authenticate their peers. TLS off (the default)
keeps the plain transport that Tephra's own client speaks, on loopback.

This module is the boundary where ``ssl`` and ``OSError`` failures to load keys and
certificates become ``InvalidArgumentError``.
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass

from txn.errors import InvalidArgumentError

__all__ = ["ClientTls", "add_client_tls_arguments", "client_tls", "server_context"]


def server_context(cert_file: str, key_file: str, client_ca_file: str | None) -> ssl.SSLContext:
    """The server's context: its certificate and key; with ``client_ca_file``, clients
    must present a certificate that CA signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file)
        if client_ca_file is not None:
            ctx.load_verify_locations(cafile=client_ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (ssl.SSLError, OSError) as exc:
        raise InvalidArgumentError(f"cannot load the server's TLS files: {exc}") from exc
    return ctx


@dataclass(frozen=True)
class ClientTls:
    """How a client connects with TLS.

    ``ca_file``: the CA that signed the server's certificate (None: the system's trust
    store). ``cert_file``/``key_file``: this client's certificate, for a server that
    requires one. ``server_hostname``: the name to check the server's certificate
    against (None: the host connected to).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_hostname: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidArgumentError("a client certificate needs its key, and a key its cert")

    def context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            if self.cert_file is not None and self.key_file is not None:
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidArgumentError(f"cannot load the client's TLS files: {exc}") from exc
        return ctx


def add_client_tls_arguments(parser: argparse.ArgumentParser, prefix: str) -> None:
    """``{prefix}ca``, ``{prefix}cert``, ``{prefix}key``: TLS to a transaction server."""
    parser.add_argument(f"{prefix}ca", help="CA of the transaction server's certificate (PEM)")
    parser.add_argument(f"{prefix}cert", help="client certificate, if it requires one (PEM)")
    parser.add_argument(f"{prefix}key", help="the client certificate's key (PEM)")


def client_tls(ca: str | None, cert: str | None, key: str | None) -> ClientTls | None:
    """The ``ClientTls`` those options ask for; None when none is given."""
    if ca is None and cert is None and key is None:
        return None
    return ClientTls(ca_file=ca, cert_file=cert, key_file=key)
