"""The results file, the ratios against peers and limits, the markdown tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.common import new_report
from benchmarks.peers.report import (
    Record,
    Results,
    compare,
    markdown,
    overheads,
    read_results,
    series,
    write_results,
)

SYSTEMS = {
    "txms": {"kind": "txms", "durable": True, "description": "txms"},
    "redis-always": {"kind": "peer", "durable": True, "description": "r"},
    "redis-everysec": {"kind": "peer", "durable": False, "description": "r"},
    "postgres": {"kind": "peer", "durable": True, "description": "p"},
    "plyvel": {"kind": "limit", "durable": True, "description": "l"},
    "http-echo": {"kind": "limit", "durable": False, "description": "h"},
}
POINT = {"message_bytes": 100, "batch": 10, "producers": 8}


def rate(system: str, value: float, workload: str = "publish", **params: object) -> Record:
    return Record(workload, dict(params) if params else dict(POINT), system, value, "msg/s")


def test_a_record_survives_the_results_file(tmp_path: Path) -> None:
    # Given a run's results
    records = [
        Record("publish", dict(POINT), "txms", 1234.5, "msg/s"),
        Record(
            "latency", {"message_bytes": 100, "rate": 1000}, "txms", 6.5, "ms p99", {"p50_ms": 2.0}
        ),
    ]
    results = Results(new_report("peers", wall_s=1.5), SYSTEMS, records)
    # When written and read back
    path = tmp_path / "results" / "peers.json"
    write_results(path, results)
    again = read_results(path)
    # Then nothing is lost, and the file has the head every result file has
    assert again == results
    document = json.loads(path.read_text())
    assert document["benchmark"] == "peers"
    assert set(document["machine"]) == {"cpus", "python", "platform"}


def test_read_results_refuses_another_benchmark_file(tmp_path: Path) -> None:
    path = tmp_path / "http.json"
    path.write_text(json.dumps({"benchmark": "http"}))
    with pytest.raises(ValueError, match="not a peers benchmark"):
        read_results(path)


def test_ratios_for_a_rate_use_the_best_durable_peer_and_the_tightest_limit() -> None:
    records = [
        rate("txms", 600.0),
        rate("redis-always", 400.0),
        rate("redis-everysec", 2000.0),  # not durable: not a peer to beat here
        rate("postgres", 300.0),
        rate("plyvel", 1200.0),
        rate("http-echo", 800.0),
    ]
    [row] = compare(records, SYSTEMS)
    assert row.best_peer == "redis-always"
    assert row.vs_peer == pytest.approx(1.5)
    assert row.limit == "http-echo"
    assert row.vs_limit == pytest.approx(0.75)
    assert row.values["redis-everysec"] == 2000.0


def test_ratios_for_a_time_read_so_that_above_one_is_ahead() -> None:
    params = {"message_bytes": 100, "rate": 1000}
    records = [
        Record("latency", params, "txms", 4.0, "ms p99"),
        Record("latency", params, "redis-always", 6.0, "ms p99"),
        Record("latency", params, "postgres", 8.0, "ms p99"),
        Record("latency", params, "plyvel", 1.0, "ms p99"),
    ]
    [row] = compare(records, SYSTEMS)
    assert row.best_peer == "redis-always"
    assert row.vs_peer == pytest.approx(1.5)
    assert row.limit == "plyvel"
    assert row.vs_limit == pytest.approx(0.25)


def test_a_point_without_peers_or_limits_has_no_ratio() -> None:
    [row] = compare([rate("txms", 10.0)], SYSTEMS)
    assert (row.best_peer, row.vs_peer, row.limit, row.vs_limit) == (None, None, None, None)


def test_rows_follow_the_order_points_were_measured() -> None:
    records = [
        rate("txms", 1.0, batch=1),
        rate("txms", 2.0, batch=100),
        rate("postgres", 3.0, batch=1),
    ]
    rows = compare(records, SYSTEMS)
    assert [(r.params["batch"], r.values) for r in rows] == [
        (1, {"txms": 1.0, "postgres": 3.0}),
        (100, {"txms": 2.0}),
    ]


def test_overhead_is_transactional_over_plain_for_the_same_system_and_point() -> None:
    records = [
        rate("txms", 1000.0),
        rate("txms", 400.0, workload="tx_publish"),
        rate("postgres", 500.0, workload="tx_publish"),  # no plain figure: no ratio
    ]
    assert overheads(records) == {("txms", tuple(sorted(POINT.items()))): pytest.approx(0.4)}


def test_series_picks_one_line_per_system_sorted_by_x() -> None:
    records = [
        rate("txms", 3.0, message_bytes=100, batch=1, producers=32),
        rate("txms", 1.0, message_bytes=100, batch=1, producers=1),
        rate("postgres", 2.0, message_bytes=100, batch=1, producers=1),
        rate("txms", 9.0, message_bytes=100, batch=100, producers=1),
    ]
    assert series(records, "publish", "producers", {"batch": 1}) == {
        "txms": [(1, 1.0), (32, 3.0)],
        "postgres": [(1, 2.0)],
    }
    assert series(records, "latency", "producers") == {}


def test_markdown_has_a_table_per_workload_with_the_ratios() -> None:
    records = [
        rate("txms", 600.0),
        rate("postgres", 300.0),
        rate("plyvel", 1200.0),
        rate("txms", 300.0, workload="tx_publish"),
        rate("postgres", 150.0, workload="tx_publish"),
        rate("postgres", 300.0, workload="publish", message_bytes=100, batch=10, producers=8),
    ]
    text = markdown(Results({}, SYSTEMS, records))
    lines = text.splitlines()
    assert "### Durable publish (messages/s)" in lines
    assert (
        "| bytes | batch | producers | txms | postgres | plyvel "
        "| txms vs best peer | txms / limit |" in lines
    )
    assert "| 100 | 10 | 8 | 600 | 300 | 1,200 | 2.00\u00d7 (postgres) | 50% |" in lines
    tx_header = next(line for line in lines if line.startswith("| bytes") and "tx/plain" in line)
    assert tx_header.endswith("| txms tx/plain | postgres tx/plain |")
    # the transactional publish is held to the plain publish's limit
    assert "| 100 | 10 | 8 | 300 | 150 | 2.00\u00d7 (postgres) | 25% | 50% | 50% |" in lines
    assert "latency" not in text.lower()


def test_figures_measured_while_others_used_the_machine_are_marked() -> None:
    busy = Record("publish", dict(POINT), "postgres", 300.0, "msg/s", {"other_cpus": 0.8})
    quiet = Record("publish", dict(POINT), "txms", 600.0, "msg/s", {"other_cpus": 0.1})
    [row] = compare([quiet, busy], SYSTEMS)
    assert row.disturbed == {"postgres"}
    text = markdown(Results({}, SYSTEMS, [quiet, busy]))
    assert "| 100 | 10 | 8 | 600 | 300 † | 2.00\u00d7 (postgres) | — |" in text
    assert text.rstrip().endswith("(the figure is likely low).")
