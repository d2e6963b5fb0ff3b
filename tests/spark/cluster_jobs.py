"""Driver programs the cluster tests ``spark-submit`` (``tests/spark/test_cluster.py``):

    cluster_jobs.py batch URL TX TOPIC ROWS
    cluster_jobs.py stream URL TX SRC DST CHECKPOINT STOP_FILE
    cluster_jobs.py fresh URL TX SRC DST CHECKPOINT

They run where spark-submit says (``local_session`` respects ``--master``).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tms.client import MessagingClient
from tms.model import TopicId
from tms.spark import local_session


def batch(url: str, tx: str, topic: str, rows: str) -> None:
    spark = local_session("cluster-batch")
    df = spark.range(int(rows), numPartitions=8).selectExpr("concat('m', id) as payload")
    options = {"url": url, "txServer": tx, "topic": topic, "batchSize": "100"}
    df.write.format("tms").mode("append").options(**options).save()
    print("WRITTEN", flush=True)
    spark.stop()


def _query(
    spark: Any, servers: tuple[str, str], topics: tuple[str, str], checkpoint: str, **extra: str
) -> Any:
    (url, tx), (src, dst) = servers, topics
    source = (
        spark.readStream.format("tms")
        .options(url=url, txServer=tx, topic=src, partitions="2", **extra)
        .load()
        .selectExpr("concat(cast(payload as string), '!') as payload")
    )
    return (
        source.writeStream.format("tms")
        .options(url=url, txServer=tx, topic=dst)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def stream(*args: str) -> None:
    """``URL TX SRC DST CHECKPOINT STOP_FILE``: run the query until ``STOP_FILE`` exists
    (or the process is killed)."""
    url, tx, src, dst, checkpoint, stop_file = args
    spark = local_session("cluster-stream")
    query = _query(spark, (url, tx), (src, dst), checkpoint)
    print("RUNNING", flush=True)
    while not Path(stop_file).exists():
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        time.sleep(0.2)
    query.stop()
    spark.stop()


def fresh(url: str, tx: str, src: str, dst: str, checkpoint: str) -> None:
    """Two batches; the checkpoint deleted; two more batches with the same batch ids at
    the same checkpoint location."""
    spark = local_session("cluster-fresh")
    client = MessagingClient(url)
    for run, starting in (("first", "earliest"), ("second", "latest")):
        query = _query(spark, (url, tx), (src, dst), checkpoint, startingOffsets=starting)
        query.processAllAvailable()
        for r in range(2):  # batch ids 1 and 2 (0 has no data), in both runs
            client.publish(TopicId("default", src), [f"{run}{r}-{i}" for i in range(5)])
            query.processAllAvailable()
        query.stop()
        shutil.rmtree(checkpoint)
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    {"batch": batch, "stream": stream, "fresh": fresh}[sys.argv[1]](*sys.argv[2:])
