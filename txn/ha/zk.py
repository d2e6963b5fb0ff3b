"""ZooKeeper for the transaction service: layout, URLs, sessions, and the boundary where
kazoo's exceptions become ``txn`` errors.

Layout under a base path (default ``/txms/txn``)::

    <base>/election/...   kazoo's election recipe: one ephemeral sequential node per server
    <base>/leader         ephemeral, the leader's "host:port" (for clients and operators)

``zk://h1:p1,h2:p2/base`` names an ensemble and a base path (``ThriftTxClient`` takes it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from txn.errors import InvalidArgumentError, TxServiceUnavailableError

__all__ = ["DEFAULT_BASE", "ZkTarget", "read_leader", "session", "translated"]

log = logging.getLogger(__name__)

DEFAULT_BASE = "/txms/txn"
DEFAULT_SESSION_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ZkTarget:
    """An ensemble (``hosts``: ``h1:p1,h2:p2``) and the service's base path."""

    hosts: str
    base: str = DEFAULT_BASE

    def __post_init__(self) -> None:
        if not self.hosts or any(not part.strip() for part in self.hosts.split(",")):
            raise InvalidArgumentError(f"bad ZooKeeper hosts {self.hosts!r}")
        if not self.base.startswith("/") or self.base.endswith("/") or "//" in self.base:
            raise InvalidArgumentError(f"bad ZooKeeper path {self.base!r}")

    @classmethod
    def from_url(cls, url: str) -> ZkTarget:
        """``zk://h1:p1,h2:p2[/base]``."""
        if not url.startswith("zk://"):
            raise InvalidArgumentError(f"not a zk:// URL: {url!r}")
        rest = url[len("zk://") :]
        hosts, slash, path = rest.partition("/")
        return cls(hosts, "/" + path.rstrip("/") if slash and path.strip("/") else DEFAULT_BASE)

    @property
    def url(self) -> str:
        return f"zk://{self.hosts}{self.base}"

    @property
    def election_path(self) -> str:
        return f"{self.base}/election"

    @property
    def leader_path(self) -> str:
        return f"{self.base}/leader"


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """The boundary: kazoo's exceptions become ``TxServiceUnavailableError``."""
    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        raise TxServiceUnavailableError(f"ZooKeeper: cannot {what}: {exc!r}") from exc


def session(
    target: ZkTarget, session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S, connect_s: float = 15
) -> KazooClient:
    """A started ``KazooClient`` (raises ``TxServiceUnavailableError`` when the ensemble
    cannot be reached within ``connect_s``)."""
    client = KazooClient(hosts=target.hosts, timeout=session_timeout_s)
    try:
        with translated(f"connect to {target.hosts}"):
            client.start(timeout=connect_s)
    except BaseException:
        client.close()
        raise
    return client


def parse_leader(data: bytes) -> tuple[str, int] | None:
    """The address in a leader node's data, None when it does not hold one."""
    host, sep, port = data.decode(errors="replace").strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host, int(port)


def read_leader(client: KazooClient, target: ZkTarget) -> tuple[str, int] | None:
    """The published leader's address, None when no leader is published."""
    with translated(f"read {target.leader_path}"):
        try:
            data, _stat = client.get(target.leader_path)
        except NoNodeError:
            return None
    return parse_leader(data)
