"""Throwaway certificates for tests: a CA, and a server certificate it signs (trustme)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class Pki:
    ca_file: Path
    cert_file: Path
    key_file: Path


def make_pki(directory: Path, *, host: str = "127.0.0.1") -> Pki:
    """A new CA and a certificate for ``host`` (an IP address or a DNS name) signed by it,
    as PEM files in ``directory``."""
    ca = trustme.CA()
    cert = ca.issue_cert(host)
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    ca.cert_pem.write_to_path(str(pki.ca_file))
    for i, pem in enumerate(cert.cert_chain_pems):
        pem.write_to_path(str(pki.cert_file), append=i > 0)
    cert.private_key_pem.write_to_path(str(pki.key_file))
    return pki
