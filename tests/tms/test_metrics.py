"""``tms.metrics``: what the counting helpers export."""

from __future__ import annotations

import pytest

from tms.metrics import TmsMetrics


def _exported(metrics: TmsMetrics, op: str) -> dict[tuple[str, str], float]:
    return dict(
        ((s.name, repr(sorted(s.labels.items()))), s.value)
        for family in metrics.registry.collect()
        for s in family.samples
        if family.name in ("tms_operation_seconds", "tms_requests")
        and s.labels.get("op") == op
        and not s.name.endswith("_created")
    )


@pytest.mark.parametrize("seconds", [0.0, 0.0003, 0.001, 0.0042, 0.7, 3.0])
def test_operations_counted_at_once_export_what_one_call_each_does(seconds: float) -> None:
    # Given two registries, one counting each operation, one counting them together
    each, together = TmsMetrics(), TmsMetrics()
    for _ in range(5):
        each.operation("publish", seconds)
    for _ in range(2):
        each.operation("publish", None)
    # When the same is counted at once
    together.operations("publish", 5, 2, seconds)
    # Then every sample (counts, buckets, sum) is the same
    assert _exported(together, "publish") == pytest.approx(_exported(each, "publish"))
    assert together.value("tms_operation_seconds_count", {"op": "publish"}) == 5
    assert together.value("tms_requests_total", {"op": "publish", "outcome": "error"}) == 2


def test_operations_without_successes_observe_no_latency() -> None:
    metrics = TmsMetrics()
    metrics.operations("store", 0, 3, 0.01)
    assert metrics.value("tms_operation_seconds_count", {"op": "store"}) == 0
    assert metrics.value("tms_requests_total", {"op": "store", "outcome": "error"}) == 3
