"""Streaming with real Spark: a query reads one topic transactionally and writes another;
every message is processed once, in order, across a restart from its checkpoint and a
replayed batch; a transaction still open holds the stream back until it commits."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack
from tests.spark.test_write_read import committed
from tms.errors import StorageUnavailableError
from tms.model import MarkersResult, TopicId
from tms.operations import Operation

SRC = TopicId("default", "src")
DST = TopicId("default", "dst")


def start_query(spark: Any, stack: Stack, checkpoint: Path, **source_options: str) -> Any:
    source = (
        spark.readStream.format("tms")
        .options(**stack.options("src", partitions="2", **source_options))
        .load()
    )
    shouted = source.selectExpr("concat(cast(payload as string), '!') as payload")
    return (
        shouted.writeStream.format("tms")
        .options(**stack.options("dst"))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def dst(stack: Stack) -> list[str]:
    return [p.decode() for _, p in committed(stack, DST)]


def test_exactly_once_in_order_across_restarts(
    spark: Any, stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.messaging.create_topic(SRC)
    stack.messaging.create_topic(DST)
    checkpoint = tmp_path / "checkpoint"
    sent: list[str] = []

    def publish(*payloads: str) -> None:
        stack.messaging.publish(SRC, list(payloads))
        sent.extend(payloads)

    for i in range(5):
        publish(*(f"a{i}-{j}" for j in range(10)))
    query = start_query(spark, stack, checkpoint)
    try:
        query.processAllAvailable()
        for i in range(5):  # while the query runs
            publish(f"b{i}")
        query.processAllAvailable()
        assert dst(stack) == [f"{p}!" for p in sent]

        # An open transaction holds the stream at its entry; a commit lets it through.
        open_tx = stack.tx.start_short()
        stack.messaging.publish(SRC, ["t1", "t2"], tx_write_pointer=open_tx.write_pointer)
        publish("after-t")
        query.processAllAvailable()
        assert dst(stack) == [f"{p}!" for p in sent[:-1]]
        stack.tx.commit_or_throw(open_tx)
        sent[-1:] = ["t1", "t2", "after-t"]
        query.processAllAvailable()
        assert dst(stack) == [f"{p}!" for p in sent]
    finally:
        query.stop()

    for i in range(3):  # while it is stopped
        publish(f"c{i}")
    # Forget that the last batch was committed: Spark replays it after the restart, and
    # the sink must not publish it twice.
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    (checkpoint / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    duplicates: list[MarkersResult] = []
    real_submit = stack.service.submit_async

    async def watching(op: Operation[object]) -> object:
        result = await real_submit(op)
        if isinstance(result, MarkersResult) and result.duplicate:
            duplicates.append(result)
        return result

    monkeypatch.setattr(stack.service, "submit_async", watching)
    query = start_query(spark, stack, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert dst(stack) == [f"{p}!" for p in sent]
    assert len(duplicates) == 1  # the replayed batch reached the sink, which said no


def test_a_fresh_checkpoint_at_the_same_place_drops_nothing(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    stack.messaging.create_topic(SRC)
    stack.messaging.create_topic(DST)
    checkpoint = tmp_path / "checkpoint"
    query = start_query(spark, stack, checkpoint)
    try:
        for r in range(3):  # batches 0, 1, 2 (at least) of the first query
            stack.messaging.publish(SRC, [f"first{r}-{i}" for i in range(5)])
            query.processAllAvailable()
    finally:
        query.stop()
    assert len(dst(stack)) == 15
    # When the checkpoint is deleted and the query starts again at the same location,
    # its batch ids start at 0 again; a new query id keeps them from being taken as
    # replays of the old batches
    shutil.rmtree(checkpoint)
    stack.messaging.publish(SRC, [f"second{i}" for i in range(30)])
    query = start_query(spark, stack, checkpoint, startingOffsets="latest")
    try:
        query.processAllAvailable()
        for r in range(3):  # batch ids the first query used too
            stack.messaging.publish(SRC, [f"third{r}-{i}" for i in range(5)])
            query.processAllAvailable()
    finally:
        query.stop()
    assert dst(stack)[15:] == [f"third{r}-{i}!" for r in range(3) for i in range(5)]


def test_a_lost_answer_to_the_batch_markers_loses_nothing(
    spark: Any, stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.messaging.create_topic(SRC)
    stack.messaging.create_topic(DST)
    real_submit = stack.service.submit_async
    lost: list[object] = []

    async def answer_lost(op: Operation[object]) -> object:
        result = await real_submit(op)
        if op.topic == DST and op.kind == "markers" and not lost:
            lost.append(result)  # the batch's markers are written; the answer is lost
            raise StorageUnavailableError("injected: the answer is lost")
        return result

    monkeypatch.setattr(stack.service, "submit_async", answer_lost)
    # When the sink's client retries the keyed markers write and is told "duplicate",
    # the duplicate is its own first try: the batch is published, and committed
    stack.messaging.publish(SRC, [f"m{i}" for i in range(10)])
    query = start_query(spark, stack, tmp_path / "checkpoint")
    try:
        query.processAllAvailable()
        stack.messaging.publish(SRC, ["n"])
        query.processAllAvailable()
    finally:
        query.stop()
    assert lost, "the fault was not injected"
    assert dst(stack) == [f"m{i}!" for i in range(10)] + ["n!"]


def test_max_offsets_per_trigger_bounds_every_batch(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    stack.messaging.create_topic(SRC)
    stack.messaging.create_topic(DST)
    stack.messaging.publish(SRC, [f"m{i}" for i in range(100)])
    query = start_query(spark, stack, tmp_path / "checkpoint", maxOffsetsPerTrigger="10")
    try:
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert sizes == [10] * 10
    assert dst(stack) == [f"m{i}!" for i in range(100)]


def test_unknown_and_misplaced_options_are_refused(spark: Any, stack: Stack) -> None:
    stack.messaging.create_topic(SRC)
    stream = spark.readStream.format("tms").options(**stack.options("src", maxRowsPerTrigger="9"))
    with pytest.raises(Exception, match="unknown option 'maxrowspertrigger'"):
        stream.load().writeStream.format("noop").start().awaitTermination(120)
    with pytest.raises(Exception, match="maxOffsetsPerTrigger is for streaming reads"):
        spark.read.format("tms").options(
            **stack.options("src", maxOffsetsPerTrigger="10")
        ).load().collect()


def test_available_now_reads_what_was_there_in_limited_batches(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    stack.messaging.create_topic(SRC)
    stack.messaging.create_topic(DST)
    stack.messaging.publish(SRC, [f"m{i}" for i in range(25)])
    source = (
        spark.readStream.format("tms")
        .options(**stack.options("src", maxOffsetsPerTrigger="10"))
        .load()
        .select("payload")
    )
    query = (
        source.writeStream.format("tms")
        .options(**stack.options("dst"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    while not query.recentProgress and query.isActive:
        time.sleep(0.05)
    stack.messaging.publish(SRC, ["late"])  # after a batch ran: not for this run
    assert query.awaitTermination(180)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [10, 10, 5]
    assert dst(stack) == [f"m{i}" for i in range(25)]
