"""The observing calls of ``MessagingClient`` (``tms.http.observe``): topic stats and
metrics. A part of ``MessagingClient``; see there for errors and retries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from tms.client.transport import Reply
from tms.model import TopicId, validate_namespace

__all__ = ["ObserveCalls"]


class _Requests(Protocol):
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


class ObserveCalls:
    def topic_stats(self: _Requests, topic: TopicId) -> dict[str, Any]:
        """A topic's ``TopicStats`` (docs/http.md): messages, bytes, first and last
        publish time, publish rate."""
        path = f"/v1/namespaces/{topic.namespace}/topics/{topic.topic}/stats"
        stats: dict[str, Any] = self._request("GET", path, topic=topic).json()
        return stats

    def namespace_stats(self: _Requests, namespace: str) -> list[dict[str, Any]]:
        """``TopicStats`` of every topic of a namespace."""
        path = f"/v1/namespaces/{validate_namespace(namespace)}/stats"
        stats: list[dict[str, Any]] = self._request("GET", path).json()
        return stats

    def metrics_text(self: _Requests) -> str:
        """The Prometheus text of ``/metrics`` (needs the metrics grant)."""
        return self._request("GET", "/metrics").text
