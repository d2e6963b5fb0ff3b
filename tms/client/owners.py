"""``OwnerRoutes``: where a binary-protocol client sends a topic's requests when the
service is a cluster (docs/operations.md) — the topic's owner once an instance named it,
else the addresses the client was given. Shared by ``tms.client.rpc`` (thread pools) and
``tms.aio`` (asyncio pools); the pool type is theirs.

* A request refused ``not_owner`` was not executed: the error names the owner's binary
  address (``NotOwnerError.owner_rpc``); the topic's requests go there from then on,
  through a pool of that address's own (its own connections and shield), and the same
  request is sent again at once — a publish included. ``fenced`` (the owner was just
  deposed) and ``not_owner`` without an address (the owner is changing) forget the
  owner, and the request is sent again after a short pause.
* A connection to an owner that fails forgets the owner (it may have died: the
  instances then name the next one), and the usual retry rules decide whether the
  request is sent again.
* Bounded: at most ``MAX_HOPS`` redirections per call, ``MAX_OWNERS`` owner pools.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Literal, Protocol, TypeVar

from tms.errors import FencedError, NotOwnerError, TmsError
from tms.rpc.endpoints import Address, Endpoints, parse_url

__all__ = ["MAX_HOPS", "OwnerRoutes", "redirect_of"]

MAX_HOPS = 8
"""Redirections (``not_owner``, ``fenced``) one call follows before it raises."""
MAX_OWNERS = 64
"""Owner addresses with a pool of their own (the oldest goes past that)."""


class _Pool(Protocol):
    endpoints: Endpoints

    def close(self) -> None: ...


P = TypeVar("P", bound=_Pool)


def redirect_of(error: BaseException) -> Address | Literal[False] | None:
    """For an error answer: the owner's address to send the request to, ``None`` to send
    it again after a pause (the owner is changing), ``False`` when it is no redirection
    (the usual rules apply)."""
    if isinstance(error, NotOwnerError) and error.owner_rpc:
        try:
            addresses, _tls = parse_url(error.owner_rpc)
        except TmsError:
            return None
        return addresses[0]
    if isinstance(error, (NotOwnerError, FencedError)):
        return None
    return False


class OwnerRoutes(Generic[P]):
    """See the module docstring. Thread-safe."""

    def __init__(
        self, default: P, make: Callable[[Endpoints], P], endpoints: Callable[[Address], Endpoints]
    ) -> None:
        """``default``: the pool of the given addresses; ``make``: a pool over
        ``Endpoints``; ``endpoints``: the ``Endpoints`` of one owner address."""
        self.default = default
        self._make = make
        self._endpoints = endpoints
        self._lock = threading.Lock()
        self._owners: dict[object, Address] = {}
        self._pools: dict[Address, P] = {}

    def pool(self, topic: object) -> P:
        """The pool a request of ``topic`` goes through now."""
        with self._lock:
            address = self._owners.get(topic)
            return self.default if address is None else self._pools[address]

    def moved(self, topic: object, address: Address | None) -> None:
        """``topic``'s owner is at ``address`` (None: not known)."""
        retired: P | None = None
        with self._lock:
            if address is None:
                self._owners.pop(topic, None)
                return
            if address not in self._pools:
                if len(self._pools) >= MAX_OWNERS:
                    oldest = next(iter(self._pools))
                    retired = self._pools.pop(oldest)
                    self._owners = {t: a for t, a in self._owners.items() if a != oldest}
                self._pools[address] = self._make(self._endpoints(address))
            self._owners[topic] = address
        if retired is not None:
            retired.close()

    def redirect(self, topic: object, error: BaseException, hops: int) -> float | None:
        """For an error answer after ``hops`` redirections: None when the usual rules
        apply, else the pause before the request is sent again (0: at once, to the
        owner now recorded)."""
        if hops >= MAX_HOPS:
            return None
        owner = redirect_of(error)
        if owner is False:
            return None
        self.moved(topic, owner)
        return 0.0 if owner is not None else min(0.05 * (hops + 1), 1.0)

    def lost(self, topic: object, pool: P) -> None:
        """A connection of ``pool`` failed: ``topic``'s owner is not known any more."""
        if pool is self.default:
            return
        with self._lock:
            if self._owners.get(topic) is not None and self._pools.get(self._owners[topic]) is pool:
                del self._owners[topic]

    def close(self) -> None:
        with self._lock:
            pools, self._pools, self._owners = list(self._pools.values()), {}, {}
        for pool in pools:
            pool.close()
