"""The txms adapters against the real standalone stack on loopback, through the same
measurement code every peer goes through."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.peers.base import Kind, System, Workload
from benchmarks.peers.driver import drive
from benchmarks.peers.txms import TxmsLean, TxmsSystem
from benchmarks.peers.workloads import (
    Settings,
    measure_cycles,
    measure_from,
    measure_latency,
    measure_publish,
    measure_scan,
    payload,
    plan,
)
from tests.benchmarks.fakes import FORK_WARNING
from tms.standalone import Launched

pytestmark = pytest.mark.filterwarnings(FORK_WARNING)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    with Launched(tmp_path_factory.mktemp("txms") / "data") as running:
        yield running


@pytest.fixture
def txms(stack: Launched) -> Iterator[TxmsSystem]:
    system = TxmsSystem(stack.url, stack.tx_address)
    yield system
    system.close()


@pytest.fixture
def lean(stack: Launched) -> Iterator[TxmsLean]:
    system = TxmsLean(stack.url)
    yield system
    system.close()


def stored(system: TxmsSystem, topic: str) -> list[bytes]:
    reader = system.reader(topic)
    try:
        out: list[bytes] = []
        cursor = reader.first()
        while True:
            payloads, cursor = reader.read(cursor, 700)
            if not payloads:
                return out
            out += payloads
    finally:
        reader.close()


def test_both_txms_systems_are_durable_and_say_what_they_take_part_in(
    txms: TxmsSystem, lean: TxmsLean
) -> None:
    assert txms.kind is lean.kind is Kind.TXMS
    assert txms.durable and lean.durable
    assert txms.workloads == frozenset(Workload) - {Workload.PIPELINED}
    assert lean.workloads == {Workload.PUBLISH}


@pytest.mark.parametrize("which", ["txms", "lean"])
def test_every_counted_message_is_stored(txms: TxmsSystem, lean: TxmsLean, which: str) -> None:
    # Given two producers in worker processes, publishing batches of 10
    system: System = txms if which == "txms" else lean
    topic = f"counted_{which}"
    system.create_topic(topic)
    batch = [payload(100)] * 10
    # When they run for a moment
    rate = drive(lambda i: system.publisher(topic, batch), 2, 0.2, forks=True)
    # Then the topic holds exactly the messages the driver counted
    messages = stored(txms, topic)
    assert rate.items > 0
    assert len(messages) == rate.items
    assert set(messages) == {payload(100)}
    system.drop_topic(topic)


def test_transactional_publishes_are_committed_and_counted(txms: TxmsSystem) -> None:
    txms.create_topic("tx_counted")
    batch = [payload(100)] * 5
    rate = drive(
        lambda i: txms.tx_publisher("tx_counted", batch, f"p{i}".encode()), 2, 0.2, forks=True
    )
    # committed: a non-transactional reader sees them all, none is rolled back
    assert rate.items > 0
    assert len(stored(txms, "tx_counted")) == rate.items
    txms.drop_topic("tx_counted")


def test_publish_measurements_run_and_drop_their_topic(txms: TxmsSystem, lean: TxmsLean) -> None:
    for system in (txms, lean):
        assert measure_publish(system, "m", size=1024, batch=10, producers=2, seconds=0.1, tx=False)
    assert measure_publish(txms, "m", size=100, batch=1, producers=1, seconds=0.1, tx=True) > 0
    assert measure_cycles(txms, 2, 0.1) > 0


def test_reads_from_the_start_and_from_a_mark(txms: TxmsSystem) -> None:
    # Given 3,000 small messages, a mark, then 500 large ones
    txms.create_topic("reads")
    txms.fill("reads", 3000, payload(100))
    mark = txms.mark("reads")
    txms.fill("reads", 500, payload(1024))
    # When read from the mark
    reader = txms.reader("reads")
    from_mark, _ = reader.read(mark, 1000)
    reader.close()
    # Then the read has every message after the mark (and may have a few from before)
    assert from_mark[-500:] == [payload(1024)] * 500
    assert set(from_mark[:-500]) <= {payload(100)}
    assert measure_scan(txms, "reads", payload(100), count=3500, page=1000, min_s=0.01) > 0
    assert measure_from(txms, "reads", mark, 500, 0.01) > 0
    txms.drop_topic("reads")


def test_latency_with_a_transactional_follower(txms: TxmsSystem) -> None:
    result = measure_latency(txms, "lat", 100, rate=100, seconds=0.3)
    assert result["messages"] == 30
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["p999_ms"]


def test_growth_reads_at_the_tail_and_in_the_middle(txms: TxmsSystem) -> None:
    settings = Settings(
        seconds=0.1,
        growth_sizes=(2000, 4000),
        read_seconds=0.01,
        workloads=frozenset({Workload.GROWTH}),
    )
    records = [r for task in plan(settings, [txms]) for r in task.run()]
    assert [(r.params["topic_messages"], r.params["at"]) for r in records] == [
        (2000, "tail"),
        (2000, "middle"),
        (4000, "tail"),
        (4000, "middle"),
    ]
    assert all(r.value > 0 and r.unit == "ms/1000 msgs" for r in records)
