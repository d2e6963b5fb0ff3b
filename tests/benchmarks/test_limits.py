"""The physical limits through the harness's own measurements: raw LevelDB and raw HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.peers.limits import EchoServer, HttpEchoLimit, LeanHttp, PlyvelLimit
from benchmarks.peers.workloads import (
    measure_cycles,
    measure_from,
    measure_latency,
    measure_publish,
    measure_scan,
    payload,
)
from tests.benchmarks.fakes import FORK_WARNING

pytestmark = pytest.mark.filterwarnings(FORK_WARNING)


@pytest.fixture
def plyvel_limit(tmp_path: Path) -> Iterator[PlyvelLimit]:
    system = PlyvelLimit(tmp_path)
    yield system
    system.close()


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    server = EchoServer()
    yield server.start()
    server.stop()


def test_plyvel_publishes_synced_batches_from_threads(plyvel_limit: PlyvelLimit) -> None:
    rate = measure_publish(
        plyvel_limit, "t", size=100, batch=10, producers=3, seconds=0.1, tx=False
    )
    assert rate > 0
    assert plyvel_limit.topics == {}  # dropped after the measurement


def test_plyvel_reads_back_what_was_filled_in_order(plyvel_limit: PlyvelLimit) -> None:
    # Given a topic filled with 2,500 messages, marked before the last 500
    plyvel_limit.create_topic("r")
    plyvel_limit.fill("r", 2000, payload(100))
    mark = plyvel_limit.mark("r")
    plyvel_limit.fill("r", 500, payload(1024))
    reader = plyvel_limit.reader("r")
    # When read in pages from the start, and from the mark
    first, cursor = reader.read(reader.first(), 1500)
    rest, cursor = reader.read(cursor, 1500)
    after_end, end = reader.read(cursor, 10)
    from_mark, _ = reader.read(mark, 1000)
    # Then every message comes once, in order, and the mark is where it was taken
    assert len(first) + len(rest) == 2500
    assert (after_end, end) == ([], cursor)
    assert from_mark == [payload(1024)] * 500
    assert measure_scan(plyvel_limit, "r", payload(100), count=2500, page=1000, min_s=0.01) > 0
    assert measure_from(plyvel_limit, "r", mark, 500, 0.01) > 0


def test_a_scan_that_returns_too_few_messages_is_an_error(plyvel_limit: PlyvelLimit) -> None:
    plyvel_limit.create_topic("short")
    plyvel_limit.fill("short", 10, payload(100))
    with pytest.raises(RuntimeError, match="10 of 11"):
        measure_scan(plyvel_limit, "short", payload(100), count=11, page=4, min_s=0.01)
    with pytest.raises(RuntimeError, match="different payload"):
        measure_scan(plyvel_limit, "short", payload(1024), count=10, page=4, min_s=0.01)


def test_plyvel_latency_is_measured_with_a_waiting_subscriber(plyvel_limit: PlyvelLimit) -> None:
    result = measure_latency(plyvel_limit, "lat", 100, rate=200, seconds=0.2)
    assert result["messages"] == 40
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["p999_ms"]


def test_plyvel_cycles_are_three_synced_writes(plyvel_limit: PlyvelLimit) -> None:
    assert measure_cycles(plyvel_limit, 2, 0.05) > 0
    assert plyvel_limit._cycles is not None
    keys = [k for k, _ in plyvel_limit._cycles.db.iterator()]
    assert sorted(keys) == sorted(
        k + f"client-{i}".encode() for k in (b"s", b"c", b"C") for i in range(2)
    )


def test_the_echo_server_answers_with_the_body_it_was_sent(echo_url: str) -> None:
    client = LeanHttp(echo_url, "/anything", b"x" * 100_000, "application/octet-stream")
    try:
        for _ in range(3):  # one keep-alive connection
            assert client.post() == b"x" * 100_000
    finally:
        client.close()


def test_http_echo_publishes_over_the_load_generator(echo_url: str) -> None:
    system = HttpEchoLimit(echo_url)
    assert measure_publish(system, "t", size=100, batch=100, producers=2, seconds=0.1, tx=False) > 0
