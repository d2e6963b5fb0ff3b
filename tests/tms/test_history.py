"""``tms.history``: rates and latency quantiles between samples of the metrics."""

from __future__ import annotations

import math

import pytest

from tms.history import MetricsHistory, quantile
from tms.metrics import TmsMetrics
from tms.model import TopicId

T = TopicId("ns", "t")


def test_quantiles_interpolate_within_buckets() -> None:
    buckets = {0.001: 0.0, 0.01: 50.0, 0.1: 100.0, math.inf: 100.0}
    assert quantile(0.5, buckets) == pytest.approx(0.01)
    assert quantile(0.25, buckets) == pytest.approx(0.001 + 0.009 * 0.5)
    assert quantile(0.99, buckets) == pytest.approx(0.01 + 0.09 * 0.98)
    assert quantile(0.5, {0.1: 0.0, math.inf: 0.0}) is None
    assert quantile(0.99, {0.1: 1.0, math.inf: 10.0}) == 0.1  # in +Inf: the largest bound


def test_series_are_rates_and_quantiles_per_interval() -> None:
    metrics = TmsMetrics()
    history = MetricsHistory(metrics, interval_s=2)
    history.sample(1_000)
    metrics.wrote(T, "write", 100, 5_000)
    metrics.fetched(T, 40, 2_000)
    for status, seconds in ((200, 0.002), (200, 0.002), (200, 0.002), (404, 0.2)):
        metrics.http_request("/r", "GET", status, seconds)
    metrics.operation("publish", 0.0007)
    history.sample(3_000)
    history.sample(5_000)  # nothing happened in this interval
    first, second = history.series()
    assert first["time"] == 3_000
    assert (first["publishRate"], first["publishBytesRate"]) == (50.0, 2_500.0)
    assert (first["fetchRate"], first["requestRate"], first["errorRate"]) == (20.0, 2.0, 0.5)
    assert 1.0 < first["httpP50Ms"] <= 2.5 and 100 < first["httpP99Ms"] <= 250
    assert 0.5 < first["publishP99Ms"] <= 1.0
    assert second["publishRate"] == 0 and second["httpP50Ms"] is None
    assert history.to_json()["intervalSeconds"] == 2


def test_history_is_bounded() -> None:
    history = MetricsHistory(TmsMetrics(), interval_s=1, keep=3)
    for t in range(10):
        history.sample(t * 1000)
    assert [p["time"] for p in history.series()] == [7000, 8000, 9000]
