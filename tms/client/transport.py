"""``Transport``: HTTP requests to one messaging service, on urllib3's connection pools.

urllib3 is the HTTP engine under ``requests``; the client calls it directly because a
request through ``requests.Session`` costs about 2.5 times the CPU (preparing, merging
settings, hooks, adapters: ~0.83 ms against ~0.33 ms per one-message publish of
``MessagingClient`` on the project's VM), and a producer sending small requests spends
most of its time there. What ``requests`` would
decide from the environment is decided the same way, once, when the transport is made:
the proxy for the service's URL (``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``, through
``requests.utils``).

HTTPS: the service's certificate is always verified, against ``ca_bundle`` (a PEM file of
CA certificates, or a directory of them) when given, else ``REQUESTS_CA_BUNDLE`` or
``CURL_CA_BUNDLE`` when set, else the system's trust store.

Contract (``HttpTransport``, what ``MessagingClient`` needs of a transport; tests give it
one of their own): ``request`` sends one request and returns the whole answer as a
``Reply`` (status, headers, body), whatever the status; a failure to connect, send or
read raises ``TransportError``. It never retries and never follows redirects: retrying is
the caller's decision (a publish must not be sent twice). ``Transport`` is thread-safe: up
to ``pool_size`` connections are kept for reuse, more are opened when more threads call
at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import requests.utils
import urllib3
from urllib3.exceptions import HTTPError

__all__ = ["HttpTransport", "Reply", "Requests", "Transport", "TransportError"]


class TransportError(Exception):
    """The request did not get an answer (connection refused or lost, timeout)."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    reason: str
    headers: Mapping[str, str]
    """Case-insensitive."""
    content: bytes

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` if it is not."""
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class Requests(Protocol):
    """What the call groups mixed into ``MessagingClient`` (``tms.client.observe``,
    ``tms.client.subscriptions``) use of it: its request method, with the client's
    retries and error mapping, and its request timeout."""

    def _request(
        self,
        method: str,
        url: str,
        *,
        topic: object = None,
        idempotent: bool = True,
        timeout_s: float | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Reply: ...

    @property
    def request_timeout_s(self) -> float: ...


class HttpTransport(Protocol):
    """See the module docstring."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout_s: float,
    ) -> Reply:
        """Send ``method path`` (a path under the service's URL, starting with ``/``)."""
        ...

    def close(self) -> None: ...


class Transport:
    """``HttpTransport`` on urllib3's connection pools (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        pool_size: int = 16,
        ca_bundle: str | os.PathLike[str] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._path = parts.path.rstrip("/")
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout_s
        options: dict[str, Any] = {"maxsize": pool_size, "block": False, "retries": False}
        if parts.scheme == "https":
            options["cert_reqs"] = "CERT_REQUIRED"
            trusted = (
                os.fspath(ca_bundle)
                if ca_bundle is not None
                else os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
            )
            if trusted and os.path.isdir(trusted):
                options["ca_cert_dir"] = trusted
            elif trusted:
                if not os.path.isfile(trusted):
                    raise ValueError(f"no CA bundle at {trusted}")
                options["ca_certs"] = trusted
            # else: urllib3 loads the system's default trust store
        proxy = requests.utils.get_environ_proxies(base_url).get(parts.scheme)
        self._manager: urllib3.PoolManager
        if proxy:
            self._manager = urllib3.ProxyManager(proxy, **options)
            self._pool: urllib3.HTTPConnectionPool | None = None
        else:
            self._manager = urllib3.PoolManager(**options)
            self._pool = self._manager.connection_from_url(self.base_url)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout_s: float,
    ) -> Reply:
        """Send ``method path`` (a path under the base URL, starting with ``/``)."""
        target = self._path + path
        if params:
            target += "?" + urlencode(params)
        all_headers = {**self._headers, **headers} if headers else self._headers
        timeout = urllib3.Timeout(connect=min(self._connect_timeout, timeout_s), read=timeout_s)
        options: dict[str, Any] = {
            "body": body,
            "headers": all_headers,
            "retries": False,
            "redirect": False,
            "timeout": timeout,
        }
        try:
            if self._pool is not None:
                response = self._pool.urlopen(method, target, assert_same_host=False, **options)
            else:  # through the proxy: the absolute URL
                response = self._manager.urlopen(method, self._origin + target, **options)
        except (HTTPError, OSError) as exc:
            raise TransportError(f"{method} {self.base_url}{path}: {exc}") from exc
        return Reply(response.status, response.reason or "", response.headers, response.data)

    def close(self) -> None:
        self._manager.clear()
