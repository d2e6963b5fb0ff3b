"""Batch writes and reads with real Spark: all of a job's rows appear at once, in one
place, exactly once, whatever its tasks went through; transactional reads of one
snapshot, split across partitions."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import functions as sf

from tests.servers import Stack
from tms.codec import keys
from tms.errors import StorageUnavailableError
from tms.model import TopicId
from tms.operations import Operation, Store
from txn.transaction import Transaction

N = 2_000


def committed(stack: Stack, topic: TopicId) -> list[tuple[bytes, bytes]]:
    """(id bytes, payload) of what a transactional consumer sees now."""
    reader = stack.tx.start_short()
    try:
        out: list[tuple[bytes, bytes]] = []
        start: bytes | None = None
        while True:
            result = stack.messaging.poll(
                topic, start=start, inclusive=start is None, transaction=reader, limit=5000
            )
            out.extend((m[0], m[1]) for m in result.messages)
            if not result.messages:
                return out
            start = result.messages[-1][0]
    finally:
        stack.tx.abort(reader)


def numbered(spark: Any, count: int, fail: Any = None) -> Any:
    """A DataFrame of ``payload`` = b"m<i>" in 4 partitions; ``fail(partition, attempt,
    row)`` may raise to inject a task failure part-way through the rows."""

    def rows(index: int, it: Iterator[Any]) -> Iterator[tuple[bytes]]:
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        for i, row in enumerate(it):
            if fail is not None:
                fail(index, attempt, i)
            yield (f"m{row.id}".encode(),)

    rdd = spark.sparkContext.parallelize(range(count), 4).map(_Row)
    return spark.createDataFrame(rdd.mapPartitionsWithIndex(rows), "payload binary")


def stored_payload_rows(stack: Stack, topic: TopicId) -> int:
    """Payload-table rows of ``topic``, seal rows excluded."""
    prefix = keys.topic_name_prefix(topic)
    rows = stack.tables.payloads.store.scan(prefix, keys.stop_key_for_prefix(prefix))
    return sum(1 for key, _ in rows if keys.decode_payload_key(key)[2] != keys.SEAL_POSITION[0])


class _Row:
    def __init__(self, i: int) -> None:
        self.id = i


def write(stack: Stack, df: Any, topic: str, **extra: str) -> None:
    df.write.format("tms").mode("append").options(
        **stack.options(topic, batchSize="100", **extra)
    ).save()


def test_round_trip_one_commit_contiguous(spark: Any, stack: Stack) -> None:
    topic = TopicId("default", "roundtrip")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, ["before"])
    write(stack, numbered(spark, N), "roundtrip")
    stack.messaging.publish(topic, ["after"])

    seen = committed(stack, topic)
    payloads = [p for _, p in seen]
    assert payloads[0] == b"before" and payloads[-1] == b"after"
    assert sorted(payloads[1:-1]) == sorted(f"m{i}".encode() for i in range(N))
    # one commit marker per partition, next to each other: positions seq k..k+3 of one ms
    markers = sorted({mid[:10] for mid, _ in seen[1:-1]})
    assert len(markers) == 4
    positions = [(int.from_bytes(m[:8], "big"), int.from_bytes(m[8:], "big")) for m in markers]
    assert all(b == (a[0], a[1] + 1) for a, b in itertools.pairwise(positions))

    df = spark.read.format("tms").options(**stack.options("roundtrip", partitions="3")).load()
    rows = df.collect()
    assert [(bytes.fromhex(r.id), bytes(r.payload)) for r in rows] == seen
    assert df.rdd.getNumPartitions() == 3
    assert rows[0].publish_time.year >= 2024


def test_string_payloads_and_ttl_column(spark: Any, stack: Stack) -> None:
    topic = TopicId("default", "strings")
    stack.messaging.create_topic(topic)
    df = spark.createDataFrame([("a", None), ("b", 3600)], "payload string, ttl int")
    write(stack, df, "strings")
    assert sorted(p for _, p in committed(stack, topic)) == [b"a", b"b"]
    with pytest.raises(Exception, match="append-only"):
        df.write.format("tms").mode("overwrite").options(**stack.options("strings")).save()
    with pytest.raises(Exception, match="binary or string, not int"):
        spark.createDataFrame([(1,)], "payload int").write.format("tms").mode("append").options(
            **stack.options("strings")
        ).save()


def test_a_retried_task_publishes_once(
    spark: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = TopicId("default", "retried")
    stack.messaging.create_topic(topic)
    # Fault injection: the service fails one store request of a task attempt that has
    # stored a batch already (its second store: same write pointer), then works again.
    real_submit = stack.service.submit_async
    seen: set[int] = set()
    failed: list[int] = []

    async def flaky(op: Operation[object]) -> object:
        if isinstance(op, Store):
            wp = op.request.tx_write_pointer
            assert wp is not None
            if wp in seen and not failed:
                failed.append(wp)
                raise StorageUnavailableError("injected: the disk went away")
            seen.add(wp)
        return await real_submit(op)

    monkeypatch.setattr(stack.service, "submit_async", flaky)
    write(stack, numbered(spark, N), "retried")
    assert failed, "the fault was not injected"
    payloads = [p for _, p in committed(stack, topic)]
    assert len(payloads) == N and len(set(payloads)) == N
    # the failed attempt's rows were stored, and stay unreferenced
    assert stored_payload_rows(stack, topic) >= N + 100


def test_a_failed_job_shows_nothing(spark: Any, stack: Stack) -> None:
    topic = TopicId("default", "failed")
    stack.messaging.create_topic(topic)
    invalid_before = stack.tx.invalid_size()

    def fail(partition: int, attempt: int, row: int) -> None:
        if partition == 2 and row == 120:
            raise RuntimeError("injected failure, every attempt")

    with pytest.raises(Exception, match="injected failure"):
        write(stack, numbered(spark, N, fail), "failed")
    assert committed(stack, topic) == []
    # the job's long transaction was invalidated, with the checkpoints of its attempts
    assert stack.tx.invalid_size() > invalid_before
    # nothing reached the message table at all: no marker was published
    assert stack.messaging.poll(topic).messages == []


def test_joining_a_long_transaction(spark: Any, stack: Stack) -> None:
    import base64

    from txn.codec import encode_transaction

    topic = TopicId("default", "joined")
    stack.messaging.create_topic(topic)
    outer = stack.tx.start_long()
    joined = base64.b64encode(encode_transaction(outer)).decode()
    write(stack, numbered(spark, 100), "joined", transaction=joined)
    assert committed(stack, topic) == []  # the owner has not committed yet
    stack.tx.commit_or_throw(outer)
    assert len(committed(stack, topic)) == 100
    short = base64.b64encode(encode_transaction(stack.tx.start_short())).decode()
    with pytest.raises(Exception, match="long transaction"):
        write(stack, numbered(spark, 10), "joined", transaction=short)


def test_transactional_read_stops_before_an_open_transaction(spark: Any, stack: Stack) -> None:
    topic = TopicId("default", "snapshot")
    stack.messaging.create_topic(topic)
    for i in range(10):
        stack.messaging.publish(topic, [f"early{i}-{j}" for j in range(20)])
    open_tx: Transaction = stack.tx.start_short()
    token = stack.messaging.publish(topic, ["pending"], tx_write_pointer=open_tx.write_pointer)
    for i in range(10):
        stack.messaging.publish(topic, [f"late{i}"])
    opts = stack.options("snapshot", partitions="4")

    df = spark.read.format("tms").options(**opts).load()
    payloads = [bytes(r.payload) for r in df.collect()]
    assert len(payloads) == 200 and all(p.startswith(b"early") for p in payloads)
    assert df.rdd.getNumPartitions() > 1  # the range was split, and no part read past it

    everything = spark.read.format("tms").options(**opts, transactional="false").load()
    assert everything.count() == 211
    stack.tx.commit_or_throw(open_tx)
    assert token is not None
    assert spark.read.format("tms").options(**opts).load().count() == 211


def test_time_filters_and_start_options(spark: Any, stack: Stack) -> None:
    topic = TopicId("default", "timed")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, ["a", "b"])
    first = stack.messaging.poll(topic).messages
    cut_ms = first[-1].publish_ms + 1
    while int(time.time() * 1000) <= cut_ms:
        time.sleep(0.005)
    stack.messaging.publish(topic, ["c"])
    opts = stack.options("timed")

    def load(**options: str) -> Any:
        return spark.read.format("tms").options(**options)  # a new reader each time

    assert [bytes(r.payload) for r in load(**opts, startTime=str(cut_ms)).load().collect()] == [
        b"c"
    ]
    assert load(**opts, endTime=str(cut_ms)).load().count() == 2
    assert [bytes(r.payload) for r in load(**opts, startId=first[0].id_hex).load().collect()] == [
        b"b",
        b"c",
    ]
    later = (
        load(**opts).load().where(sf.col("publish_time") >= sf.lit(cut_ms / 1000).cast("timestamp"))
    )
    assert [bytes(r.payload) for r in later.collect()] == [b"c"]


def test_time_filters_pushed_down(spark: Any, stack: Stack) -> None:
    topic = TopicId("default", "pushed")
    stack.messaging.create_topic(topic)
    stack.messaging.publish(topic, [f"old{i}" for i in range(50)])
    cut_ms = stack.messaging.poll(topic).messages[-1].publish_ms + 1
    while int(time.time() * 1000) <= cut_ms:
        time.sleep(0.005)
    stack.messaging.publish(topic, ["new"])

    def fetched() -> float:
        labels = {"namespace": "default", "topic": "pushed"}
        return stack.service.metrics.value("tms_fetched_messages_total", labels)

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = spark.read.format("tms").options(**stack.options("pushed", pushFilters="true"))
        newer = df.load().where(sf.col("publish_time") >= sf.lit(cut_ms / 1000).cast("timestamp"))
        before = fetched()
        assert [bytes(r.payload) for r in newer.collect()] == [b"new"]
        assert fetched() - before == 1  # the read began at the filter's time
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_rows_routed_by_their_topic_column_and_read_back_with_it(spark: Any, stack: Stack) -> None:
    for name in ("route-a", "route-b", "route-c"):
        stack.messaging.create_topic(TopicId("default", name))
    rows = [(f"p{i}", "route-a" if i % 3 else "route-b") for i in range(60)]
    df = spark.createDataFrame(rows, "payload string, topic string").repartition(3)
    df.write.format("tms").mode("append").options(
        url=stack.url, txServer=stack.tx_address, batchSize="7"
    ).save()
    # one transaction: both topics' rows appear together
    a = [p.decode() for _, p in committed(stack, TopicId("default", "route-a"))]
    b = [p.decode() for _, p in committed(stack, TopicId("default", "route-b"))]
    assert sorted(a) == sorted(p for p, t in rows if t == "route-a")
    assert sorted(b) == sorted(p for p, t in rows if t == "route-b")
    # the topic option wins over the column
    df.write.format("tms").mode("append").options(**stack.options("route-c")).save()
    assert len(committed(stack, TopicId("default", "route-c"))) == 60
    with pytest.raises(Exception, match="topic option or a topic column"):
        spark.createDataFrame([("x",)], "payload string").write.format("tms").mode(
            "append"
        ).options(url=stack.url, txServer=stack.tx_address).save()

    read = spark.read.format("tms").options(
        url=stack.url, txServer=stack.tx_address, topicPattern="route-[ab]"
    )
    counts = {r.topic: r["count"] for r in read.load().groupBy("topic").count().collect()}
    assert counts == {"route-a": 40, "route-b": 20}
    listed = spark.read.format("tms").options(
        url=stack.url, txServer=stack.tx_address, topics="route-b,route-c"
    )
    assert listed.load().count() == 80


@pytest.mark.parametrize("transport", ["http", "tms"])
def test_round_trip_over_each_transport(spark: Any, stack: Stack, transport: str) -> None:
    # Payloads of every length class (empty, one-byte and two-byte Avro lengths), routed
    # to two topics, written and read back over HTTP (Avro bodies encoded and decoded
    # from Arrow columns) and over the binary protocol (tms://).
    url = stack.url if transport == "http" else stack.rpc_url
    names = (f"{transport}-x", f"{transport}-y")
    for name in names:
        stack.messaging.create_topic(TopicId("default", name))
    rows = [(bytes([i % 251]) * (i % 300), names[i % 2]) for i in range(3000)]
    df = spark.createDataFrame(rows, "payload binary, topic string").repartition(4)
    df.write.format("tms").mode("append").options(
        url=url, txServer=stack.tx_address, batchSize="333"
    ).save()
    for name in names:
        seen = committed(stack, TopicId("default", name))
        assert sorted(p for _, p in seen) == sorted(p for p, t in rows if t == name)
        read = spark.read.format("tms").options(
            url=url, txServer=stack.tx_address, topic=name, partitions="3"
        )
        got = [(bytes.fromhex(r.id), bytes(r.payload), r.topic) for r in read.load().collect()]
        assert sorted(got) == sorted((i, p, name) for i, p in seen)
        times = {r.publish_time.timestamp() for r in read.load().collect()}
        assert times == {int.from_bytes(i[:8], "big") / 1000 for i, _ in seen}
