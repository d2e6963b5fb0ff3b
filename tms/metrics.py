"""Metrics of the messaging core, in a registry per service (so tests and several
services in one process do not share counters). Exported in Prometheus text format by
the HTTP service; readable directly in tests.

Names follow Prometheus conventions (``_total`` counters, base units).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from tms.errors import TmsError
from tms.model import TopicId
from tms.queues import QueueStats

__all__ = ["QueueSource", "SubscriptionLags", "TmsMetrics", "TopicSizes"]

log = logging.getLogger(__name__)

TopicSizes = Callable[[], Iterable[tuple[TopicId, int]]]
QueueSource = Callable[[], Iterable[tuple[TopicId, QueueStats]]]
"""Each queue's counts (``MessagingService.queues_stats``), read at every collection."""
"""Approximate stored bytes per live topic, read when metrics are collected."""

SubscriptionLags = Callable[[], Iterable[tuple[Any, Any]]]
"""(``tms.subscription.SubscriptionId``, ``Lag``) of every subscription, read when
metrics are collected."""

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384)


class _Children:
    """A labelled metric's children by label values, each looked up once: ``labels()``
    costs several microseconds, and these are on every request's path."""

    def __init__(self, metric: MetricWrapperBase) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


def _observe_many(histogram: Any, amount: float, count: int) -> None:
    """``count`` observations of ``amount`` in a child of a ``Histogram``: what
    ``observe`` does once, weighted (prometheus_client has no weighted observe; this uses
    its ``_sum``, ``_upper_bounds`` and ``_buckets``, which ``tests/tms/test_metrics.py``
    checks against ``observe``)."""
    histogram._sum.inc(amount * count)
    for bound, bucket in zip(histogram._upper_bounds, histogram._buckets, strict=True):
        if amount <= bound:
            bucket.inc(count)
            break


class TmsMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.published_messages = Counter(
            "tms_published_messages",
            "Messages written (publish and store)",
            ["namespace", "topic", "op"],
            registry=r,
        )
        self.published_bytes = Counter(
            "tms_published_bytes", "Payload bytes written", ["namespace", "topic", "op"], registry=r
        )
        self.requests = Counter("tms_requests", "Core operations", ["op", "outcome"], registry=r)
        self.fetched_messages = Counter(
            "tms_fetched_messages",
            "Messages returned to consumers",
            ["namespace", "topic"],
            registry=r,
        )
        self.fetched_bytes = Counter(
            "tms_fetched_bytes", "Payload bytes returned", ["namespace", "topic"], registry=r
        )
        self.rolled_back = Counter(
            "tms_rolled_back_entries", "Entries negated by rollback", registry=r
        )
        self.batch_operations = Histogram(
            "tms_writer_batch_operations",
            "Operations per group-committed write",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.write_seconds = Histogram(
            "tms_writer_batch_seconds",
            "Time to build and sync one batch",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_length = Gauge(
            "tms_writer_queue_length", "Operations in the last batch's queue", registry=r
        )
        self.latency = Histogram(
            "tms_operation_seconds",
            "Core operation latency",
            ["op"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.held_waits = Counter(
            "tms_held_waits",
            "Long polls' waits behind a transaction in progress, by how each ended "
            "(finished, changed, timeout, unknown; held_again: read again after it "
            "finished and held behind another)",
            ["outcome"],
            registry=r,
        )
        self.cleanup_deleted = Counter(
            "tms_cleanup_deleted_rows", "Rows removed by cleanup", ["reason"], registry=r
        )
        self.cleanup_negated = Counter(
            "tms_cleanup_negated_entries", "Entries of invalid transactions negated", registry=r
        )
        self.http_requests = Counter(
            "tms_http_requests", "HTTP requests", ["route", "method", "status"], registry=r
        )
        self.http_seconds = Histogram(
            "tms_http_request_seconds",
            "HTTP request latency",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prune_upper_bound = Gauge(
            "tms_cleanup_prune_upper_bound",
            "Largest transaction id up to which no invalid transaction has data here "
            "(as last computed by cleanup; -1 before)",
            registry=r,
        )
        self.prune_upper_bound.set(-1)

        self._published_messages = _Children(self.published_messages)
        self._published_bytes = _Children(self.published_bytes)
        self._fetched_messages = _Children(self.fetched_messages)
        self._fetched_bytes = _Children(self.fetched_bytes)
        self._requests = _Children(self.requests)
        self._latency = _Children(self.latency)
        self._http_requests = _Children(self.http_requests)
        self._http_seconds = _Children(self.http_seconds)

    def watch_topic_sizes(self, source: TopicSizes) -> None:
        """Export ``tms_topic_bytes`` from ``source`` at every collection."""
        self.registry.register(_TopicSizeCollector(source))

    def watch_queues(self, source: QueueSource, clock: Callable[[], int]) -> None:
        """Export the ``tms_queue_*`` gauges from ``source`` at every collection
        (``clock``: the service's, in ms, for the oldest ready message's age)."""
        self.registry.register(_QueueCollector(source, clock))

    def watch_subscription_lags(self, source: SubscriptionLags) -> None:
        """Export ``tms_subscription_lag`` from ``source`` at every collection."""
        self.registry.register(_SubscriptionLagCollector(source))

    def wrote(self, topic: TopicId, op: str, messages: int, payload_bytes: int) -> None:
        self._published_messages(topic.namespace, topic.topic, op).inc(messages)
        self._published_bytes(topic.namespace, topic.topic, op).inc(payload_bytes)

    def fetched(self, topic: TopicId, messages: int, payload_bytes: int) -> None:
        self._fetched_messages(topic.namespace, topic.topic).inc(messages)
        self._fetched_bytes(topic.namespace, topic.topic).inc(payload_bytes)

    def operation(self, op: str, seconds: float | None) -> None:
        """One core operation: done in ``seconds``, or failed (``None``)."""
        if seconds is None:
            self._requests(op, "error").inc()
        else:
            self._requests(op, "ok").inc()
            self._latency(op).observe(seconds)

    def operations(self, op: str, ok: int, failed: int, seconds: float) -> None:
        """``ok`` operations done in ``seconds`` each, ``failed`` failed: as many calls
        of ``operation``, counted at once (the binary protocol's writes of one loop turn
        finish together; one call each cost ~2 µs a write)."""
        if failed:
            self._requests(op, "error").inc(failed)
        if ok:
            self._requests(op, "ok").inc(ok)
            _observe_many(self._latency(op), seconds, ok)

    def http_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self._http_requests(route, method, str(status)).inc()
        self._http_seconds(route).observe(seconds)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 when absent), for tests and the CLI."""
        value = self.registry.get_sample_value(name, labels or {})
        return float(value) if value is not None else 0.0

    def exposition(self) -> bytes:
        """The Prometheus text format."""
        data: bytes = generate_latest(self.registry)
        return data


class _TopicSizeCollector(Collector):
    def __init__(self, source: TopicSizes) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tms_topic_bytes",
            "Approximate bytes a topic takes in storage (LevelDB: on disk; the newest writes "
            "count once flushed from the write buffer)",
            labels=["namespace", "topic"],
        )
        try:
            for topic, size in self._source():
                family.add_metric([topic.namespace, topic.topic], size)
        except TmsError as exc:  # metrics must not fail because storage did
            log.warning("topic sizes unavailable: %s", exc)
        yield family


_QUEUE_GAUGES = {
    "ready": "Messages due and waiting for a receiver",
    "leased": "Messages leased to a receiver (with a transactional ack pending, too)",
    "scheduled": "Messages waiting for their due time (or their back-off)",
    "dead": "Messages dead-lettered after max_attempts deliveries",
    "pending": "Messages enqueued by transactions not yet committed",
    "acked": "Acked messages not yet purged",
}


class _QueueCollector(Collector):
    def __init__(self, source: QueueSource, clock: Callable[[], int]) -> None:
        self._source = source
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "topic"]
        families = {
            name: GaugeMetricFamily(f"tms_queue_{name}_messages", text, labels=labels)
            for name, text in _QUEUE_GAUGES.items()
        }
        age = GaugeMetricFamily(
            "tms_queue_oldest_ready_age_seconds",
            "How long the longest-waiting ready message has been due (0: none ready)",
            labels=labels,
        )
        try:
            now = self._clock()
            for topic, stats in self._source():
                key = [topic.namespace, topic.topic]
                for name, family in families.items():
                    family.add_metric(key, getattr(stats, name))
                oldest = stats.oldest_ready_ms
                age.add_metric(key, 0 if oldest is None else max(0, now - oldest) / 1000)
        except TmsError as exc:  # metrics must not fail because storage did
            log.warning("queue counts unavailable: %s", exc)
        yield from families.values()
        yield age


class _SubscriptionLagCollector(Collector):
    def __init__(self, source: SubscriptionLags) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tms_subscription_lag",
            "Messages between a subscription's position and the end of its topic (counted "
            "over the newest 1,000 rows of the topic, estimated beyond)",
            labels=["namespace", "topic", "subscription"],
        )
        try:
            for sub, lag in self._source():
                family.add_metric([sub.topic.namespace, sub.topic.topic, sub.name], lag.messages)
        except TmsError as exc:  # metrics must not fail because storage did
            log.warning("subscription lags unavailable: %s", exc)
        yield family
