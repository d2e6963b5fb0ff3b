"""The data source's pure parts: option parsing, offsets, splitting a read."""

from __future__ import annotations

import base64
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import TmsInvalidArgumentError
from tms.spark import resolve_master
from tms.spark.options import EARLIEST, LATEST, SourceOptions, Use, parse_duration_ms, parse_time_ms
from tms.spark.positions import (
    StreamPosition,
    decode_offset,
    encode_offset,
    entry,
    next_entry,
    plan_ranges,
)

positions = st.tuples(
    st.integers(0, 10**6), st.integers(0, 0xFFFF), st.integers(0, 10**6), st.integers(0, 0xFFFF)
)


@given(positions, positions, st.integers(1, 16))
def test_ranges_cover_exactly_in_order(
    a: tuple[int, int, int, int], b: tuple[int, int, int, int], n: int
) -> None:
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
    assert all(hi[2:] == (0, 0) for _, hi in ranges[:-1])  # never inside a commit marker


def test_ranges_split_by_the_real_time_range() -> None:
    assert plan_ranges(entry(100, 5), entry(200, 0), 4) == [
        (entry(100, 5), entry(125, 0)),
        (entry(125, 0), entry(150, 0)),
        (entry(150, 0), entry(175, 0)),
        (entry(175, 0), entry(200, 0)),
    ]
    # within one millisecond (a Spark job's markers, side by side): between entries
    assert plan_ranges(entry(100, 0), entry(100, 4), 4) == [
        (entry(100, i), entry(100, i + 1)) for i in range(4)
    ]
    inside = (100, 1, 90, 7)  # a start inside the marker at (100, 1)
    assert plan_ranges(inside, next_entry(100, 3), 2) == [
        (inside, entry(100, 3)),
        (entry(100, 3), entry(100, 4)),
    ]


def test_offsets_round_trip_and_read_the_old_form() -> None:
    positions = {
        "b": StreamPosition((5, 1, 0, 0)),
        "a": StreamPosition((7, 2, 6, 9), exact=True),
    }
    offset = encode_offset(positions)
    assert offset == {
        "topics": {
            "a": {"ms": 7, "seq": 2, "wms": 6, "pseq": 9, "exact": True},
            "b": {"ms": 5, "seq": 1},
        }
    }
    assert list(offset["topics"]) == ["a", "b"]  # the same positions give the same offset
    assert decode_offset(offset, None) == positions
    assert decode_offset({"ms": 5, "seq": 1}, "events") == {"events": StreamPosition(entry(5, 1))}
    for bad in ({"topics": {"a": {"ms": "x", "seq": 1}}}, {"topics": {"a": {"ms": 1}}}, {"x": 1}):
        with pytest.raises(TmsInvalidArgumentError):
            decode_offset(bad, "events")


def test_options() -> None:
    read = SourceOptions.parse(
        {"URL": "http://h:1", "topic": "t", "txServer": "h:2", "startTime": "2026-01-01T00:00:00"},
        Use.READ,
    )
    assert read.topics == ("t",) and read.transactional
    assert read.start_ms == 1_767_225_600_000
    assert not SourceOptions.parse({"url": "u", "topic": "t"}, Use.READ).transactional
    assert SourceOptions.parse({"url": "u", "topics": "a, b,a"}, Use.READ).topics == ("a", "b")
    pattern = SourceOptions.parse({"url": "u", "topicPattern": "ev.*"}, Use.STREAM_READ)
    assert pattern.topic_pattern == "ev.*" and pattern.topics == ()
    stream = SourceOptions.parse(
        {
            "url": "u",
            "topic": "t",
            "maxOffsetsPerTrigger": "10",
            "minOffsetsPerTrigger": "5",
            "maxTriggerDelay": "30s",
            "failOnDataLoss": "false",
            "startingOffsets": '{"t": -1}',
            "startingTimestamp": "1700000000000",
        },
        Use.STREAM_READ,
    )
    assert (stream.max_rows, stream.min_rows, stream.max_trigger_delay_ms) == (10, 5, 30_000)
    assert stream.starting == {"t": LATEST} and stream.starting_ms == 1_700_000_000_000
    assert not stream.fail_on_data_loss
    assert SourceOptions.parse({"url": "u", "topic": "t"}, Use.STREAM_READ).starting == EARLIEST
    write = SourceOptions.parse(
        {"url": "u", "txServer": "h:2", "transaction": "AAE=", "txTimeoutS": "5"}, Use.WRITE
    )
    assert write.transaction == base64.b64decode("AAE=") and write.tx_timeout_s == 5
    assert write.topic is None  # routed by a topic column
    assert parse_time_ms("2023-11-14T22:13:20+00:00", "t") == 1_700_000_000_000
    assert [parse_duration_ms(d, "d") for d in ("250ms", "3", "2m", "1h")] == [
        250,
        3000,
        120_000,
        3_600_000,
    ]


@pytest.mark.parametrize(
    ("use", "options", "message"),
    [
        (Use.READ, {"topic": "t"}, "url"),
        (Use.READ, {"url": "u"}, "exactly one of the topic"),
        (Use.READ, {"url": "u", "topic": "t", "topics": "a"}, "exactly one"),
        (Use.READ, {"url": "u", "topic": "bad.name"}, "topic"),
        (Use.READ, {"url": "u", "topicPattern": "("}, "regex"),
        (Use.READ, {"url": "u", "topic": "t", "transactional": "true"}, "txServer"),
        (Use.READ, {"url": "u", "topic": "t", "transactional": "maybe"}, "true or false"),
        (Use.READ, {"url": "u", "topic": "t", "partitions": "x"}, "integer"),
        (Use.READ, {"url": "u", "topic": "t", "startTime": "yesterday"}, "ISO-8601"),
        (Use.READ, {"url": "u", "topic": "t", "startTime": "-5"}, "negative"),
        (Use.READ, {"url": "u", "topic": "t", "startId": "abc"}, "hex"),
        (Use.READ, {"url": "u", "topic": "t", "startId": "00" * 19}, "20-byte"),
        (Use.READ, {"url": "u", "topic": "t", "maxOffsetsPerTrigger": "10"}, "streaming reads"),
        (Use.READ, {"url": "u", "topic": "t", "maxRowsPerTrigger": "10"}, "unknown option"),
        (Use.STREAM_READ, {"url": "u", "topic": "t", "startTime": "1"}, "for batch reads"),
        (Use.STREAM_READ, {"url": "u", "topic": "t", "startingOffsets": "middle"}, "earliest"),
        (Use.STREAM_READ, {"url": "u", "topic": "t", "startingOffsets": "[1]"}, "object"),
        (Use.STREAM_READ, {"url": "u", "topic": "t", "maxOffsetsPerTrigger": "0"}, "positive"),
        (
            Use.STREAM_READ,
            {"url": "u", "topic": "t", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "9"},
            "exceeds",
        ),
        (Use.STREAM_READ, {"url": "u", "topic": "t", "maxTriggerDelay": "soon"}, "duration"),
        (Use.STREAM_READ, {"url": "u", "topic": "t", "failOnDataLoss": "no"}, "true or false"),
        (Use.WRITE, {"url": "u", "topic": "t"}, "txServer"),
        (Use.WRITE, {"url": "u", "topic": "t", "txServer": "h:1", "batchSize": "0"}, "positive"),
        (Use.WRITE, {"url": "u", "txServer": "h:1", "transaction": "@@"}, "base64"),
        (Use.WRITE, {"url": "u", "txServer": "h:1", "writerId": "x"}, "unknown option"),
        (Use.WRITE, {"url": "u", "txServer": "h:1", "checkpointLocation": "/c"}, "streaming"),
        (Use.STREAM_WRITE, {"url": "u", "txServer": "h:1", "transaction": "AAE="}, "batch"),
        (Use.WRITE, {"url": "u", "txServer": "h:1", "partitions": "2"}, "reads"),
        (Use.WRITE, {"url": "u", "txServer": "h:1", "txTlsKey": "k.pem"}, "needs its key"),
    ],
)
def test_bad_options(use: Use, options: dict[str, str], message: str) -> None:
    with pytest.raises(TmsInvalidArgumentError, match=message):
        SourceOptions.parse(options, use)


def test_the_master_spark_was_given_wins() -> None:
    assert resolve_master("local[1]", "spark://h:7077", {}) == "local[1]"  # the caller's
    assert resolve_master(None, "spark://h:7077", {"SPARK_MASTER": "x"}) is None  # submit's
    assert resolve_master(None, None, {"SPARK_MASTER": "spark://e:1"}) == "spark://e:1"
    assert resolve_master(None, None, {}) == "local[*]"
