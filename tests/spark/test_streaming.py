"""Streaming with real Spark: a query reads one topic transactionally and writes another;
every message is processed once, in order, across a restart from its checkpoint and a
replayed batch; a transaction still open holds the stream back until it commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.servers import Stack
from tests.spark.test_write_read import committed
from tms.model import MarkersResult, TopicId
from tms.operations import Operation

SRC = TopicId("default", "src")
DST = TopicId("default", "dst")


def start_query(spark: Any, stack: Stack, checkpoint: Path) -> Any:
    source = spark.readStream.format("tms").options(**stack.options("src", partitions="2")).load()
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
