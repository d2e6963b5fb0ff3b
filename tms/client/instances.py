"""``Instances``: the service instances a ``MessagingClient`` talks to, and where each
request goes: a topic's last known owner for its writes, else the current instance;
``failed`` moves the current one on. One transport per instance, made on first use.

``owner_url(location, path)`` reads the owner's base URL out of a ``307``'s
``Location`` (the same path on the owner).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence

from tms.client.transport import HttpTransport, Transport

__all__ = ["Instances", "owner_url", "parse_urls"]


def parse_urls(urls: str | Sequence[str]) -> list[str]:
    """One URL, several separated by commas, or a list; without trailing slashes. A
    binary-protocol URL (``tms://h1:p1,h2:p2``) is one: it names its addresses itself."""
    if isinstance(urls, str) and urls.startswith(("tms://", "tmss://")):
        return [urls]
    parts = urls.split(",") if isinstance(urls, str) else list(urls)
    found = [u.strip().rstrip("/") for u in parts if u.strip()]
    if not found:
        raise ValueError("no service URL")
    return found


def owner_url(location: str, path: str) -> str:
    """The owner's base URL in a redirect's ``Location``; "" when there is none."""
    cut = location.find(path) if location else -1
    return location[:cut].rstrip("/") if cut > 0 else ""


class Instances:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        transport: HttpTransport | Mapping[str, HttpTransport] | None = None,
        ca_bundle: str | os.PathLike[str] | None = None,
    ) -> None:
        """``transport``: for the first URL, or one per URL (default: ``Transport``)."""
        self.urls = list(urls)
        self._ca_bundle = ca_bundle
        self._lock = threading.Lock()
        self._current = 0
        self._owners: dict[object, str] = {}  # topic -> the URL of its last known owner
        self._transports: dict[str, HttpTransport] = {}
        if isinstance(transport, Mapping):
            self._transports.update(transport)
        elif transport is not None:
            self._transports[self.urls[0]] = transport

    def target(self, topic: object) -> str:
        """Where a request about ``topic`` (None: no topic) goes."""
        with self._lock:
            owner = self._owners.get(topic) if topic is not None else None
            return owner or self.urls[self._current]

    def transport(self, url: str) -> HttpTransport:
        with self._lock:
            transport = self._transports.get(url)
            if transport is None:
                transport = Transport(url, ca_bundle=self._ca_bundle)
                self._transports[url] = transport
            return transport

    def owner(self, topic: object, url: str) -> None:
        """``url`` owns ``topic`` (""/None topic: forget what was known)."""
        with self._lock:
            if url and topic is not None:
                self._owners[topic] = url
            else:
                self._owners.pop(topic, None)

    def failed(self, url: str, topic: object) -> None:
        """``url`` could not be reached: not the owner to go to, nor the current one."""
        with self._lock:
            if self._owners.get(topic) == url:
                del self._owners[topic]
            if self.urls[self._current] == url:
                self._current = (self._current + 1) % len(self.urls)

    def close(self) -> None:
        with self._lock:
            transports, self._transports = list(self._transports.values()), {}
        for transport in transports:
            transport.close()
