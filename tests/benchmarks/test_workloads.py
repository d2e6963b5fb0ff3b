"""The workload plan and what every system is sent (no system is run here)."""

from __future__ import annotations

import pytest

from benchmarks.peers.base import Kind, Workload
from benchmarks.peers.workloads import (
    Settings,
    latency_payload,
    payload,
    percentile,
    plan,
    settings_for,
)
from tests.benchmarks.fakes import NamedSystem

ALL = frozenset(Workload)


def test_payload_is_the_same_bytes_every_time_half_random_half_zeros() -> None:
    for size in (100, 1024):
        body = payload(size)
        assert len(body) == size
        assert body == payload(size)
        assert body[size // 2 :] == bytes(size - size // 2)
        assert body[: size // 2] != bytes(size // 2)
    assert payload(100) != payload(1024)[:100]


def test_payload_has_room_for_the_latency_timestamp() -> None:
    with pytest.raises(ValueError):
        payload(7)


def test_latency_payload_carries_the_send_time_then_the_payload() -> None:
    now_ns = 1_795_000_000_123_456_789
    body = latency_payload(100, now_ns)
    assert len(body) == 100
    assert int.from_bytes(body[:8], "big") == now_ns
    assert body[8:] == payload(100)[8:]


def test_percentile_is_nearest_rank_below() -> None:
    ordered = [float(i) for i in range(1, 1001)]
    assert percentile(ordered, 0.5) == 501.0
    assert percentile(ordered, 0.99) == 991.0
    assert percentile(ordered, 0.999) == 1000.0
    assert percentile([3.0], 0.999) == 3.0
    assert percentile([], 0.5) == 0.0


def test_quick_settings_are_a_subset_of_the_full_ones() -> None:
    full, quick = settings_for(False), settings_for(True)
    assert quick.seconds < full.seconds
    for name in ("message_bytes", "batches", "producers", "tx_batches", "cycle_clients"):
        assert set(getattr(quick, name)) <= set(getattr(full, name)), name
    assert full.growth_sizes == (10_000, 100_000, 1_000_000, 10_000_000)
    assert set(full.producers) == {1, 8, 16, 32}
    assert set(quick.pipeline_connections) <= {1, 4, 16}
    assert set(full.batches) == {1, 10, 100}
    assert set(full.message_bytes) == {100, 1024}


def test_settings_refuse_a_tx_point_without_its_plain_publish() -> None:
    # the overhead ratio divides a transactional rate by the plain one at the same point
    with pytest.raises(ValueError, match="not published"):
        Settings(seconds=1, batches=(1,), tx_batches=(1, 100))
    Settings(
        seconds=1, batches=(1,), tx_batches=(1, 100), workloads=frozenset({Workload.TX_PUBLISH})
    )


def test_settings_refuse_growth_sizes_that_do_not_double() -> None:
    with pytest.raises(ValueError):
        Settings(seconds=1, growth_sizes=(10_000, 15_000))
    with pytest.raises(ValueError):
        Settings(seconds=1, growth_sizes=(100_000, 10_000))


def test_plan_interleaves_systems_point_by_point() -> None:
    # Given two systems that both publish
    a = NamedSystem("a", Kind.TXMS, frozenset({Workload.PUBLISH}))
    b = NamedSystem("b", Kind.PEER, frozenset({Workload.PUBLISH}))
    settings = Settings(
        seconds=1,
        message_bytes=(100,),
        batches=(1, 10),
        producers=(1,),
        tx_batches=(1,),
        tx_producers=(1,),
    )
    # When the run is planned
    labels = [t.label for t in plan(settings, [a, b])]
    # Then every point is measured on both before the next point
    assert labels == [
        "publish 100 B x1 p1 a",
        "publish 100 B x1 p1 b",
        "publish 100 B x10 p1 a",
        "publish 100 B x10 p1 b",
    ]


def test_plan_gives_a_system_only_the_workloads_it_takes_part_in() -> None:
    echo = NamedSystem("echo", Kind.LIMIT, frozenset({Workload.PUBLISH}))
    reader = NamedSystem("reader", Kind.PEER, frozenset({Workload.CONSUME, Workload.TAIL}))
    tasks = plan(settings_for(True), [echo, reader])
    assert {t.label.split()[0] for t in tasks if t.label.endswith(" echo")} == {"publish"}
    assert [t.label for t in tasks if t.label.endswith(" reader")] == [
        "fill 20,000 x 100 B reader",
        "consume 100 B from start reader",
        "consume 100 B at tail reader",
    ]


def test_plan_covers_every_point_of_the_full_run() -> None:
    everything = NamedSystem("all", Kind.TXMS, ALL)
    labels = [t.label for t in plan(settings_for(False), [everything])]
    assert sum(label.startswith("publish ") for label in labels) == 2 * 3 * 4
    assert sum(label.startswith("pipelined ") for label in labels) == 2
    assert sum(label.startswith("tx_publish ") for label in labels) == 3 * 2
    assert sum(label.startswith("tx cycles ") for label in labels) == 3
    # 10,000/s needs a sender that does not wait for each answer: "all" has none
    assert sum(label.startswith("latency ") for label in labels) == 2 * 2
    everything.sends_async = True
    labels = [t.label for t in plan(settings_for(False), [everything])]
    assert sum(label.startswith("latency ") for label in labels) == 2 * 3
    assert [label for label in labels if label.startswith("growth ")] == [
        "growth 10,000 all",
        "growth 100,000 all",
        "growth 1,000,000 all",
        "growth 10,000,000 all",
    ]
    assert len(labels) == len(set(labels))


def test_plan_honours_the_chosen_workloads() -> None:
    everything = NamedSystem("all", Kind.TXMS, ALL)
    settings = settings_for(True, workloads=frozenset({Workload.TX_CYCLE}))
    assert [t.label for t in plan(settings, [everything])] == [
        "tx cycles c1 all",
        "tx cycles c8 all",
    ]
