"""The observing calls of ``MessagingClient`` (``tms.http.observe``): topic stats and
metrics. A part of ``MessagingClient``; see there for errors and retries."""

from __future__ import annotations

from typing import Any

from tms.client.transport import Requests
from tms.model import TopicId, validate_namespace

__all__ = ["ObserveCalls"]


class ObserveCalls:
    def topic_stats(self: Requests, topic: TopicId) -> dict[str, Any]:
        """A topic's ``TopicStats`` (docs/http.md): messages, bytes, first and last
        publish time, publish rate."""
        path = f"/v1/namespaces/{topic.namespace}/topics/{topic.topic}/stats"
        stats: dict[str, Any] = self._request("GET", path, topic=topic).json()
        return stats

    def namespace_stats(self: Requests, namespace: str) -> list[dict[str, Any]]:
        """``TopicStats`` of every topic of a namespace."""
        path = f"/v1/namespaces/{validate_namespace(namespace)}/stats"
        stats: list[dict[str, Any]] = self._request("GET", path).json()
        return stats

    def metrics_text(self: Requests) -> str:
        """The Prometheus text of ``/metrics`` (needs the metrics grant)."""
        return self._request("GET", "/metrics").text
