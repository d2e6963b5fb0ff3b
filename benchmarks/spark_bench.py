"""Spark against the Python client: publishing and reading the same rows, same run.

The standalone stack (one process) on loopback; Spark ``local[2]`` in this process.

* publish: ``N`` rows of 100 bytes written by a Spark job (``format("tms")``: staged per
  task, one commit), against one Python process with ``MessagingClient`` publishing the
  same payloads in requests of 1,000 — plainly, and transactionally (staged with
  ``store``, then one commit marker and a commit, as the job does);
* read: the topic read into a DataFrame (materialized with the ``noop`` sink), against
  one process polling it in requests of 10,000.

    python -m benchmarks.spark_bench [--rows N] [--quick]

Results: ``benchmarks/results/spark.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import new_report, write_report
from tms.client import MessagingClient
from tms.model import TopicId
from tms.spark import local_session
from tms.standalone import Launched
from txn.rpc.client import ThriftTxClient

RESULTS = Path(__file__).with_name("results")
PAYLOAD = os.urandom(50) + b"\x00" * 50
BATCH = 1000


def client_publish(stack: Launched, topic: TopicId, rows: int, *, transactional: bool) -> float:
    client = MessagingClient(stack.url)
    client.create_topic(topic)
    tx_client = ThriftTxClient(stack.tx_address)
    started = time.perf_counter()
    tx = tx_client.start_long() if transactional else None
    for sent in range(0, rows, BATCH):
        payloads = [PAYLOAD] * min(BATCH, rows - sent)
        if tx is None:
            client.publish(topic, payloads)
        else:
            client.store(topic, payloads, tx_write_pointer=tx.write_pointer)
    if tx is not None:
        client.publish_markers(topic, [tx.write_pointer])
        tx_client.can_commit_or_throw(tx, [])
        tx_client.commit_or_throw(tx)
    elapsed = time.perf_counter() - started
    client.close()
    tx_client.close()
    return rows / elapsed


def spark_publish(spark: Any, stack: Launched, topic: TopicId, rows: int, parts: int) -> float:
    from pyspark.sql import functions as sf

    MessagingClient(stack.url).create_topic(topic)
    df = spark.range(rows, numPartitions=parts).select(
        sf.lit(PAYLOAD).cast("binary").alias("payload")
    )
    started = time.perf_counter()
    (
        df.write.format("tms")
        .mode("append")
        .options(url=stack.url, namespace=topic.namespace, topic=topic.topic)
        .option("txServer", stack.tx_address)
        .option("batchSize", str(BATCH))
        .save()
    )
    return rows / (time.perf_counter() - started)


def client_read(stack: Launched, topic: TopicId, rows: int) -> float:
    client = MessagingClient(stack.url)
    tx_client = ThriftTxClient(stack.tx_address)
    started = time.perf_counter()
    reader = tx_client.start_short()
    seen = 0
    start: bytes | None = None
    while True:
        result = client.poll(
            topic, start=start, inclusive=start is None, limit=10_000, transaction=reader
        )
        if not result.messages:
            break
        seen += len(result.messages)
        start = result.messages[-1][0]
    tx_client.abort(reader)
    elapsed = time.perf_counter() - started
    assert seen == rows, (seen, rows)
    client.close()
    tx_client.close()
    return rows / elapsed


def spark_read(spark: Any, stack: Launched, topic: TopicId, rows: int, parts: int) -> float:
    started = time.perf_counter()
    df = (
        spark.read.format("tms")
        .options(url=stack.url, namespace=topic.namespace, topic=topic.topic)
        .option("txServer", stack.tx_address)
        .option("partitions", str(parts))
        .load()
    )
    df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    return rows / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark.json")
    args = parser.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    parts = args.partitions
    report: dict[str, Any] = new_report(
        "spark",
        rows=rows,
        row_bytes=len(PAYLOAD),
        spark="local[2]",
        partitions=parts,
    )
    spark = local_session("txms-bench", **{"spark.default.parallelism": str(parts)})
    spark.range(10).count()  # the JVM and Python workers warm, outside the timings
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        stack = Launched(Path(tmp) / "data")
        try:
            # Python data source workers start on first use (seconds): not timed.
            spark_publish(spark, stack, TopicId("bench", "warmup"), 10, parts)
            spark_read(spark, stack, TopicId("bench", "warmup"), 10, parts)
            plain = client_publish(stack, TopicId("bench", "client"), rows, transactional=False)
            print(f"client publish, batches of {BATCH}: {plain:,.0f} rows/s", flush=True)
            staged = client_publish(stack, TopicId("bench", "staged"), rows, transactional=True)
            print(f"client store + one commit:        {staged:,.0f} rows/s", flush=True)
            job = spark_publish(spark, stack, TopicId("bench", "spark"), rows, parts)
            print(f"Spark job, one transaction:       {job:,.0f} rows/s", flush=True)
            polled = client_read(stack, TopicId("bench", "spark"), rows)
            print(f"client transactional poll:        {polled:,.0f} rows/s", flush=True)
            read = spark_read(spark, stack, TopicId("bench", "spark"), rows, parts)
            print(f"Spark DataFrame read:             {read:,.0f} rows/s", flush=True)
        finally:
            stack.stop()
            spark.stop()
    report.update(
        {
            "publish_rows_per_s": {
                "client_plain": round(plain),
                "client_staged_one_commit": round(staged),
                "spark_job": round(job),
            },
            "read_rows_per_s": {"client_poll": round(polled), "spark_dataframe": round(read)},
        }
    )
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
