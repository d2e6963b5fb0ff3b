"""``MetricsHistory``: the service's metrics sampled over time, for live charts.

``sample(now_ms)`` reads the totals of ``TmsMetrics`` (published and fetched messages
and bytes, HTTP requests and errors, the HTTP and publish latency histograms, the
writer's queue) and keeps the last ``keep`` samples. ``series()`` turns consecutive
samples into points: rates per second over each interval, and latency quantiles (p50,
p99, in ms) from the histogram buckets that filled in it, interpolated within a bucket
as Prometheus' ``histogram_quantile`` does (None when nothing was observed). Reading
the registry costs microseconds and no storage call. Thread-safe.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from tms.metrics import TmsMetrics

__all__ = ["MetricsHistory", "quantile"]

_COUNTERS = {
    "published": "published_messages",
    "publishedBytes": "published_bytes",
    "fetched": "fetched_messages",
    "fetchedBytes": "fetched_bytes",
    "requests": "http_requests",
}


@dataclass(frozen=True, slots=True)
class _Sample:
    at_ms: int
    totals: dict[str, float]
    http_buckets: dict[float, float]
    publish_buckets: dict[float, float]
    queue_length: float


def _total(metric: MetricWrapperBase, *, errors_only: bool = False) -> float:
    total = 0.0
    for family in metric.collect():
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            if errors_only and int(sample.labels.get("status", "0")) < 400:
                continue
            total += sample.value
    return total


def _buckets(metric: MetricWrapperBase, **match: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over the matching series."""
    out: dict[float, float] = {}
    for family in metric.collect():
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            if any(sample.labels.get(k) != v for k, v in match.items()):
                continue
            bound = float(sample.labels["le"])
            out[bound] = out.get(bound, 0.0) + sample.value
    return out


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile of cumulative ``buckets`` (upper bound -> count), linear
    within the bucket it falls in; the largest finite bound when it falls in +Inf;
    None when there are no observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def _delta(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


class MetricsHistory:
    """See the module docstring."""

    def __init__(self, metrics: TmsMetrics, *, interval_s: float, keep: int = 300) -> None:
        self._metrics = metrics
        self.interval_s = interval_s
        self._samples: deque[_Sample] = deque(maxlen=keep + 1)
        self._lock = threading.Lock()

    def sample(self, now_ms: int) -> None:
        m = self._metrics
        totals = {key: _total(getattr(m, name)) for key, name in _COUNTERS.items()}
        totals["errors"] = _total(m.http_requests, errors_only=True)
        sample = _Sample(
            at_ms=now_ms,
            totals=totals,
            http_buckets=_buckets(m.http_seconds),
            publish_buckets=_buckets(m.latency, op="publish"),
            queue_length=m.value("tms_writer_queue_length"),
        )
        with self._lock:
            self._samples.append(sample)

    def series(self) -> list[dict[str, Any]]:
        """One point per interval between samples, oldest first."""
        with self._lock:
            samples = list(self._samples)
        return [_point(a, b) for a, b in itertools.pairwise(samples)]

    def to_json(self) -> dict[str, Any]:
        """The REST API's ``MetricsHistory``."""
        return {"intervalSeconds": self.interval_s, "points": self.series()}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _point(before: _Sample, after: _Sample) -> dict[str, Any]:
    seconds = max((after.at_ms - before.at_ms) / 1000, 1e-3)

    def rate(key: str) -> float:
        return round(max(0.0, after.totals[key] - before.totals[key]) / seconds, 3)

    http = _delta(after.http_buckets, before.http_buckets)
    publish = _delta(after.publish_buckets, before.publish_buckets)
    return {
        "time": after.at_ms,
        "publishRate": rate("published"),
        "publishBytesRate": rate("publishedBytes"),
        "fetchRate": rate("fetched"),
        "fetchBytesRate": rate("fetchedBytes"),
        "requestRate": rate("requests"),
        "errorRate": rate("errors"),
        "httpP50Ms": _ms(quantile(0.5, http)),
        "httpP99Ms": _ms(quantile(0.99, http)),
        "publishP50Ms": _ms(quantile(0.5, publish)),
        "publishP99Ms": _ms(quantile(0.99, publish)),
        "queueLength": after.queue_length,
    }
