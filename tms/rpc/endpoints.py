"""Where a binary-protocol client connects, and shielding the addresses that keep failing
(TubeMQ's "shielding bad nodes"). Pure logic with an injected clock; thread-safe.

``tms://host:port`` names one address, ``tms://h1:p1,h2:p2`` several addresses of the
same service (``tmss://`` for TLS). ``pick`` gives the address to use: the last one that
worked while it is not shielded, else the next one that is not. An address that failed
``shield_after`` times in a row is *shielded*: not picked for ``shield_s``, doubling with
every further failure up to ``max_shield_s``. While every address is shielded, ``pick``
raises ``ServiceUnavailableError`` at once (a dead service costs its callers no connect
timeouts) until the first shield ends. A success clears an address's record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tms.errors import ServiceUnavailableError, TmsInvalidArgumentError

__all__ = ["DEFAULT_PORT", "SCHEMES", "Address", "Endpoints", "parse_url"]

Address = tuple[str, int]
DEFAULT_PORT = 15167
SCHEMES = ("tms", "tmss")


def parse_url(url: str) -> tuple[list[Address], bool]:
    """The addresses of a ``tms://`` or ``tmss://`` URL, and whether it asks for TLS."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.netloc:
        raise TmsInvalidArgumentError(f"not a tms:// or tmss:// URL: {url!r}")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise TmsInvalidArgumentError(f"a tms:// URL names addresses only: {url!r}")
    addresses = []
    for item in parts.netloc.split(","):
        if item.startswith("["):  # [IPv6]:port
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else rest
        else:
            host, _, port = item.partition(":")
        try:
            number = int(port) if port else DEFAULT_PORT
        except ValueError as exc:
            raise TmsInvalidArgumentError(f"bad port in {url!r}") from exc
        if not host or not 0 < number < 65536:
            raise TmsInvalidArgumentError(f"bad address {item!r} in {url!r}")
        addresses.append((host, number))
    return addresses, parts.scheme == "tmss"


@dataclass(slots=True)
class _Record:
    failures: int = 0
    shielded_until: float = 0.0


class Endpoints:
    """See the module docstring."""

    def __init__(
        self,
        addresses: list[Address],
        *,
        shield_after: int = 3,
        shield_s: float = 1.0,
        max_shield_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not addresses:
            raise TmsInvalidArgumentError("no address to connect to")
        if shield_after < 1 or shield_s <= 0 or max_shield_s < shield_s:
            raise TmsInvalidArgumentError("bad shielding settings")
        self.addresses = list(addresses)
        self._records = {a: _Record() for a in self.addresses}
        self._current = 0
        self._shield_after = shield_after
        self._shield_s = shield_s
        self._max_shield_s = max_shield_s
        self._monotonic = monotonic
        self._lock = threading.Lock()

    def pick(self) -> Address:
        with self._lock:
            now = self._monotonic()
            n = len(self.addresses)
            for i in range(n):
                index = (self._current + i) % n
                address = self.addresses[index]
                if self._records[address].shielded_until <= now:
                    self._current = index
                    return address
            soonest = min(r.shielded_until for r in self._records.values())
        raise ServiceUnavailableError(
            f"every address of {self.describe()} is shielded after repeated failures; "
            f"the next attempt in {soonest - now:.1f} s"
        )

    def failed(self, address: Address) -> None:
        with self._lock:
            record = self._records.get(address)
            if record is None:
                return
            record.failures += 1
            beyond = record.failures - self._shield_after
            if beyond >= 0:
                period = min(self._shield_s * 2 ** min(beyond, 30), self._max_shield_s)
                record.shielded_until = self._monotonic() + period
            if self.addresses[self._current] == address:
                self._current = (self._current + 1) % len(self.addresses)

    def succeeded(self, address: Address) -> None:
        with self._lock:
            record = self._records.get(address)
            if record is not None and record.failures:
                record.failures = 0
                record.shielded_until = 0.0

    def shielded(self, address: Address) -> bool:
        with self._lock:
            return self._records[address].shielded_until > self._monotonic()

    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.addresses)
