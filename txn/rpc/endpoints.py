"""Where a ``ThriftTxClient`` connects: one address, a list to fail over between, or the
leader that ZooKeeper names (``zk://host:port,host:port/path``, ``txn.ha.discovery``).

Contract of an ``Endpoints``:

* ``current(timeout_s)`` is the address to connect to now; it may block up to
  ``timeout_s`` while none is known (no leader published yet) and then raises
  ``TxServiceUnavailableError``.
* ``failed(address)`` says a connection to ``address`` failed or broke: a list moves on
  to its next address; ZooKeeper discovery waits for the leader's node to change.
* ``pause(address, delay_s)`` is the wait before retrying after ``address`` failed:
  ZooKeeper discovery waits itself, up to ``delay_s`` but no longer than until a new
  leader is published, and returns True; a list returns False (the caller sleeps).
* ``close()`` releases what discovery holds (a ZooKeeper session). Idempotent.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from txn.config import DEFAULT_PORT
from txn.errors import InvalidArgumentError

__all__ = ["AddressList", "Endpoints", "endpoints", "parse_address"]

Address = tuple[str, int]


def parse_address(address: str | Address) -> Address:
    """``"host:port"``, ``"host"`` or ``(host, port)``."""
    if isinstance(address, tuple):
        return address
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, DEFAULT_PORT
    try:
        return host or "127.0.0.1", int(port)
    except ValueError as exc:
        raise InvalidArgumentError(f"bad address {address!r}") from exc


class Endpoints(Protocol):
    def current(self, timeout_s: float) -> Address: ...

    def failed(self, address: Address) -> None: ...

    def pause(self, address: Address, delay_s: float) -> bool: ...

    def describe(self) -> str:
        """For messages."""
        ...

    def close(self) -> None: ...


class AddressList:
    """Fixed addresses, tried in turn: the first until it fails, then the next."""

    def __init__(self, addresses: Sequence[str | Address]) -> None:
        if not addresses:
            raise InvalidArgumentError("no transaction server address given")
        self._addresses = [parse_address(a) for a in addresses]
        self._index = 0
        self._lock = threading.Lock()

    def current(self, timeout_s: float) -> Address:
        with self._lock:
            return self._addresses[self._index]

    def failed(self, address: Address) -> None:
        with self._lock:
            if self._addresses[self._index] == address:
                self._index = (self._index + 1) % len(self._addresses)

    def pause(self, address: Address, delay_s: float) -> bool:
        return False

    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self._addresses)

    def close(self) -> None:
        pass


def endpoints(spec: str | Address | Sequence[str | Address] | Endpoints) -> Endpoints:
    """Endpoints from what a caller gives ``ThriftTxClient``: ``"host:port"``, a tuple,
    ``"h1:p1,h2:p2"`` or a list of those, ``"zk://..."``, or ready ``Endpoints``."""
    if isinstance(spec, str):
        if spec.startswith("zk://"):
            from txn.ha.discovery import ZooKeeperLeader  # noqa: PLC0415 - kazoo only if used

            return ZooKeeperLeader.from_url(spec)
        return AddressList(spec.split(","))
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], int):
        return AddressList([(str(spec[0]), spec[1])])
    if isinstance(spec, list | tuple):
        return AddressList([a for a in spec if isinstance(a, str | tuple)])
    assert not isinstance(spec, Sequence)
    return spec
