"""The data source's pure parts: option parsing and splitting a read by time."""

from __future__ import annotations

import base64
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId
from tms.spark.options import SourceOptions, parse_time_ms
from tms.spark.read import plan_ranges

positions = st.tuples(st.integers(0, 10**6), st.integers(0, 0xFFFF))


@given(positions, positions, st.integers(1, 16))
def test_ranges_cover_exactly_in_order(a: tuple[int, int], b: tuple[int, int], n: int) -> None:
    first, stop = min(a, b), max(a, b)
    ranges = plan_ranges(first, stop, n)
    if first == stop:
        assert ranges == []
        return
    assert 1 <= len(ranges) <= n
    assert ranges[0][0] == first and ranges[-1][1] == stop
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert end == start  # no gap, no overlap
    assert all(lo < hi for lo, hi in ranges)
    assert all(hi[1] == 0 for _, hi in ranges[:-1])  # cuts at millisecond boundaries


def test_ranges_split_evenly_by_time() -> None:
    assert plan_ranges((100, 5), (200, 0), 4) == [
        ((100, 5), (125, 0)),
        ((125, 0), (150, 0)),
        ((150, 0), (175, 0)),
        ((175, 0), (200, 0)),
    ]
    assert plan_ranges((100, 0), (100, 9), 4) == [((100, 0), (100, 9))]  # one ms: one range


def test_options() -> None:
    opts = SourceOptions.parse(
        {"URL": "http://h:1", "topic": "t", "txServer": "h:2", "startTime": "2026-01-01T00:00:00"}
    )
    assert opts.topic == TopicId("default", "t") and opts.transactional
    assert opts.start_ms == 1_767_225_600_000
    assert not SourceOptions.parse({"url": "u", "topic": "t"}).transactional
    ckpt = SourceOptions.parse({"url": "u", "topic": "t", "checkpointLocation": "/c"})
    assert ckpt.writer_id is not None and ckpt.writer_id.startswith("ckpt-")
    assert SourceOptions.parse({"url": "u", "topic": "t", "transaction": "AAE="}).transaction == (
        base64.b64decode("AAE=")
    )
    assert parse_time_ms("1700000000000", "t") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T22:13:20+00:00", "t") == 1_700_000_000_000


@pytest.mark.parametrize(
    "options",
    [
        {"topic": "t"},
        {"url": "u"},
        {"url": "u", "topic": "bad.name"},
        {"url": "u", "topic": "t", "transactional": "true"},  # no txServer
        {"url": "u", "topic": "t", "transactional": "maybe"},
        {"url": "u", "topic": "t", "batchSize": "0"},
        {"url": "u", "topic": "t", "partitions": "x"},
        {"url": "u", "topic": "t", "startTime": "yesterday"},
        {"url": "u", "topic": "t", "startTime": "-5"},
        {"url": "u", "topic": "t", "startId": "abc"},
        {"url": "u", "topic": "t", "startId": "00" * 19},
        {"url": "u", "topic": "t", "transaction": "@@"},
        {"url": "u", "topic": "t", "startingOffsets": "middle"},
    ],
)
def test_bad_options(options: dict[str, str]) -> None:
    with pytest.raises(TmsInvalidArgumentError):
        SourceOptions.parse(options)
