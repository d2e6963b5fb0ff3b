"""The streaming reader's planning against the real servers, driven as Spark drives it
(initialOffset, latestOffset with a read limit, partitions, read), without a JVM: limits,
starting positions, several topics, data loss, and a backlog split by its real range."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from tests.servers import Stack
from tms.errors import TmsError
from tms.model import TopicId
from tms.spark.options import SourceOptions, Use
from tms.spark.positions import decode_offset
from tms.spark.read import ReadRange
from tms.spark.stream import TmsStreamReader


def reader(stack: Stack, **options: str) -> TmsStreamReader:
    opts = {"url": stack.url, "txServer": stack.tx_address, **options}
    return TmsStreamReader(SourceOptions.parse(opts, Use.STREAM_READ))


def rows(r: TmsStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[str, str]]:
    """(topic, payload) of a batch, read the way Spark's tasks read it."""
    out = []
    for part in r.partitions(start, end):
        assert isinstance(part, ReadRange)
        for batch in r.read(part):
            for row in batch.to_pylist():
                out.append((row["topic"], row["payload"].decode()))
    return out


def batches(r: TmsStreamReader, limit: Any = None) -> Iterator[list[tuple[str, str]]]:
    start = r.initialOffset()
    while True:
        end = r.latestOffset(start, limit or r.getDefaultReadLimit())
        if end == start:
            return
        yield rows(r, start, end)
        start = end


def test_max_offsets_per_trigger_counts_staged_rows(stack: Stack) -> None:
    topic = TopicId("default", "limited")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, [f"p{i}" for i in range(7)])
    # a Spark job's worth: 25 rows staged under one pointer, one commit marker
    tx = stack.tx.start_short()
    stack.messaging.store(topic, [f"s{i}" for i in range(25)], tx_write_pointer=tx.write_pointer)
    stack.messaging.publish_markers(topic, [tx.write_pointer])
    stack.tx.commit_or_throw(tx)
    stack.messaging.publish(topic, ["last"])

    r = reader(stack, topic="limited", maxOffsetsPerTrigger="10")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    seen = list(batches(r))
    assert [len(b) for b in seen] == [10, 10, 10, 3]  # cut inside the marker, twice
    flat = [p for b in seen for _, p in b]
    assert flat == [*(f"p{i}" for i in range(7)), *(f"s{i}" for i in range(25)), "last"]
    # Spark may ask for everything at once (Trigger.Once): the limit is then ignored
    everything = reader(stack, topic="limited", maxOffsetsPerTrigger="10")
    assert [len(b) for b in batches(everything, ReadAllAvailable())] == [33]


def test_the_limit_is_shared_between_topics(stack: Stack) -> None:
    for name, count in (("busy", 30), ("quiet", 2)):
        stack.messaging.create_topic(TopicId("default", name))
        stack.messaging.publish(TopicId("default", name), [f"{name}{i}" for i in range(count)])
    r = reader(stack, topics="busy,quiet", maxOffsetsPerTrigger="10")
    first = next(batches(r))
    assert sorted(p for t, p in first if t == "quiet") == ["quiet0", "quiet1"]
    assert len(first) == 10  # the quiet topic's unused share went to the busy one


def test_min_offsets_wait_until_the_delay(stack: Stack) -> None:
    topic = TopicId("default", "trickle")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, ["a", "b"])
    now = [0.0]
    opts = SourceOptions.parse(
        {"url": stack.url, "topic": "trickle", "minOffsetsPerTrigger": "5"}
        | {"maxTriggerDelay": "60s"},
        Use.STREAM_READ,
    )
    r = TmsStreamReader(opts, monotonic=lambda: now[0])
    assert isinstance(r.getDefaultReadLimit(), ReadMinRows)
    start = r.initialOffset()
    assert r.latestOffset(start, r.getDefaultReadLimit()) == start  # 2 < 5: wait
    stack.messaging.publish(topic, ["c", "d", "e"])
    end = r.latestOffset(start, r.getDefaultReadLimit())  # 5: go
    assert [p for _, p in rows(r, start, end)] == ["a", "b", "c", "d", "e"]
    stack.messaging.publish(topic, ["f"])
    assert r.latestOffset(end, r.getDefaultReadLimit()) == end
    now[0] += 61  # maxTriggerDelay since the last batch: go with what there is
    assert [p for _, p in rows(r, end, r.latestOffset(end, r.getDefaultReadLimit()))] == ["f"]


def test_starting_positions(stack: Stack) -> None:
    topic = TopicId("default", "starts")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, ["old1", "old2"])
    ids = [m.id_hex for m in stack.messaging.poll(topic).messages]
    cut = stack.messaging.poll(topic).messages[-1].publish_ms + 1
    while int(time.time() * 1000) <= cut:
        time.sleep(0.005)
    stack.messaging.publish(topic, ["new"])

    def payloads(**options: str) -> list[str]:
        return [p for b in batches(reader(stack, topic="starts", **options)) for _, p in b]

    assert payloads() == ["old1", "old2", "new"]
    assert payloads(startingOffsets="latest") == []
    assert payloads(startingOffsets='{"starts": -2}') == ["old1", "old2", "new"]
    assert payloads(startingOffsets=f'{{"starts": "{ids[1]}"}}') == ["old2", "new"]
    assert payloads(startingTimestamp=str(cut)) == ["new"]
    with pytest.raises(TmsError, match="no position for starts"):
        reader(stack, topic="starts", startingOffsets='{"other": -2}').initialOffset()


def test_a_pattern_picks_up_new_topics(stack: Stack) -> None:
    stack.messaging.create_topic(TopicId("default", "ev-a"))
    stack.messaging.create_topic(TopicId("default", "other"))
    stack.messaging.publish(TopicId("default", "ev-a"), ["a1"])
    stack.messaging.publish(TopicId("default", "other"), ["no"])
    r = reader(stack, topicPattern="ev-.*")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert rows(r, start, end) == [("ev-a", "a1")]
    stack.messaging.create_topic(TopicId("default", "ev-b"))
    stack.messaging.publish(TopicId("default", "ev-b"), ["b1", "b2"])
    stack.messaging.publish(TopicId("default", "ev-a"), ["a2"])
    later = r.latestOffset(end, ReadAllAvailable())
    assert sorted(rows(r, end, later)) == [("ev-a", "a2"), ("ev-b", "b1"), ("ev-b", "b2")]


def test_the_first_batch_of_a_backlog_is_split_by_its_real_time_range(stack: Stack) -> None:
    topic = TopicId("default", "backlog")
    stack.messaging.create_topic(topic)
    for i in range(8):
        stack.messaging.publish(topic, [f"m{i}-{j}" for j in range(10)])
        time.sleep(0.003)  # a backlog spread over some milliseconds
    r = reader(stack, topic="backlog", partitions="4")
    start = r.initialOffset()  # earliest: position 0
    end = r.latestOffset(start, ReadAllAvailable())
    parts = r.partitions(start, end)
    assert len(parts) == 4  # not one range from epoch 0 holding everything
    sizes = [sum(b.num_rows for b in r.read(p)) for p in parts]
    # the first and the last publish fall in different ranges, however unevenly a loaded
    # machine spaced the ones between
    assert sum(sizes) == 80 and sizes[0] > 0 and sizes[-1] > 0


def test_messages_that_expired_unread_fail_the_query(stack: Stack) -> None:
    topic = TopicId("default", "expiring")
    stack.messaging.create_topic(topic, {"ttl": "3600"})
    stack.messaging.publish(topic, [f"m{i}" for i in range(10)])
    now = [int(time.time() * 1000)]

    def make(**options: str) -> TmsStreamReader:
        opts = SourceOptions.parse(
            {"url": stack.url, "topic": "expiring", "maxOffsetsPerTrigger": "4", **options},
            Use.STREAM_READ,
        )
        return TmsStreamReader(opts, wall_ms=lambda: now[0])

    r = make()
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert decode_offset(end, None)["expiring"].exact  # a message is known to be there
    # Given the messages after the cut expire before the next batch (ttl cut to 1 s)
    stack.messaging.update_topic(topic, {"ttl": "1"})
    time.sleep(1.1)
    now[0] = int(time.time() * 1000)
    stack.messaging.publish(topic, ["fresh"])
    later = r.latestOffset(end, r.getDefaultReadLimit())
    with pytest.raises(TmsError, match="expired"):
        r.partitions(end, later)
    tolerant = make(failOnDataLoss="false")
    assert [p for _, p in rows(tolerant, end, later)] == ["fresh"]
