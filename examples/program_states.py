"""Program-state events in, per-program statistics out, in one transaction.

The design's first use case: programs publish their state changes (``STARTING``,
``RUNNING``, ``COMPLETED``, ``FAILED``) to a topic as they happen. This Spark job reads
every *committed* event transactionally, works out for each program how many runs it
had, how they ended and how long they took, and publishes one summary per program to a
second topic, all in one transaction: a consumer of the summaries sees all of them or
none, never a half-written report. A run still open when the job started (its
transaction not committed) is not counted, and never half counted.

    .venv/bin/python examples/program_states.py            # starts its own stack
    .venv/bin/python examples/program_states.py --url http://127.0.0.1:15166 \\
        --tx-server 127.0.0.1:15165                          # against `make run`
    spark-submit --master spark://HOST:7077 examples/program_states.py \\
        --url http://HOST:15166 --tx-server HOST:15165        # on a cluster

It runs where ``spark-submit`` (or ``SPARK_MASTER``) says, locally when nothing says.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
from typing import Any

from pyspark.sql import functions as sf

from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.errors import TopicAlreadyExistsError
from tms.model import TopicId
from tms.spark import local_session
from tms.standalone import Launched
from txn.context import TransactionContext
from txn.rpc.client import ThriftTxClient

EVENTS = TopicId("demo", "program_states")
SUMMARIES = TopicId("demo", "program_summaries")
PROGRAMS = ["ingest", "dedupe", "enrich", "score", "export"]


def seed(client: MessagingClient, tx_client: ThriftTxClient, runs: int = 200) -> int:
    """Publish the events of ``runs`` program runs, each run's events in one transaction
    (as a program would, with its own state change); one more run stays open. Returns
    the number of committed events."""
    for topic in (EVENTS, SUMMARIES):
        with contextlib.suppress(TopicAlreadyExistsError):
            client.create_topic(topic)
    rng = random.Random(17)
    publisher = TransactionalPublisher(client)
    published = 0
    for run in range(runs):
        program = rng.choice(PROGRAMS)
        start_ms = 1_760_000_000_000 + run * 60_000
        end = rng.choices(["COMPLETED", "FAILED"], weights=[9, 1])[0]
        events = [
            {"program": program, "run": run, "state": state, "ms": start_ms + offset}
            for state, offset in (
                ("STARTING", 0),
                ("RUNNING", 500),
                (end, 500 + rng.randint(1_000, 60_000)),
            )
        ]
        with TransactionContext(tx_client, publisher):
            publisher.publish(EVENTS, [json.dumps(e).encode() for e in events])
        published += len(events)
    # A run whose transaction is still open: consumers must stop before it.
    open_run = TransactionContext(tx_client, publisher)
    open_run.start()
    publisher.publish(EVENTS, [json.dumps({"program": "ingest", "state": "STARTING"}).encode()])
    publisher.commit_tx()  # written with its write pointer, not committed
    return published


def summarize(spark: Any, url: str, tx_server: str) -> list[dict[str, Any]]:
    """The Spark job: events (committed only) -> one summary per program -> the
    summaries topic, in one transaction. Returns the summaries written."""
    options = {"url": url, "txServer": tx_server, "namespace": EVENTS.namespace}
    events = (
        spark.read.format("tms")
        .options(**options, topic=EVENTS.topic, partitions="4")
        .load()
        .select(
            sf.from_json(
                sf.col("payload").cast("string"),
                "program string, run int, state string, ms long",
            ).alias("e")
        )
        .select("e.*")
    )
    runs = events.groupBy("program", "run").agg(
        sf.min("ms").alias("started"),
        sf.max("ms").alias("ended"),
        sf.max(sf.when(sf.col("state").isin("COMPLETED", "FAILED"), sf.col("state"))).alias(
            "outcome"
        ),
    )
    summaries = (
        runs.groupBy("program")
        .agg(
            sf.count("*").alias("runs"),
            sf.sum((sf.col("outcome") == "COMPLETED").cast("int")).alias("completed"),
            sf.sum((sf.col("outcome") == "FAILED").cast("int")).alias("failed"),
            sf.round(sf.avg(sf.col("ended") - sf.col("started")) / 1000, 1).alias("avg_s"),
        )
        .orderBy("program")
    )
    rows = [row.asDict() for row in summaries.collect()]
    (
        summaries.select(sf.to_json(sf.struct("*")).alias("payload"))
        .write.format("tms")
        .mode("append")
        .options(**options, topic=SUMMARIES.topic)
        .save()
    )
    return rows


def committed(client: MessagingClient, tx_client: ThriftTxClient, topic: TopicId) -> list[Any]:
    """What a transactional consumer of ``topic`` sees now."""
    reader = tx_client.start_short()
    try:
        messages = client.poll(topic, transaction=reader).messages
    finally:
        tx_client.abort(reader)
    return [json.loads(m.payload) for m in messages]


def run(url: str, tx_server: str, runs: int = 200) -> None:
    client, tx_client = MessagingClient(url), ThriftTxClient(tx_server)
    print(f"seeding {EVENTS.namespace}:{EVENTS.topic} ...")
    print(f"  {seed(client, tx_client, runs)} committed events, and one run left open")
    spark = local_session("program-states", **{"spark.sql.shuffle.partitions": "2"})
    try:
        written = summarize(spark, url, tx_server)
    finally:
        spark.stop()
    print(f"summaries committed to {SUMMARIES.namespace}:{SUMMARIES.topic}:")
    for summary in committed(client, tx_client, SUMMARIES):
        print(f"  {summary}")
    assert len(written) == len(PROGRAMS)
    client.close()
    tx_client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="messaging service (default: start a stack)")
    parser.add_argument("--tx-server", help="HOST:PORT of the transaction server")
    parser.add_argument("--runs", type=int, default=200, help="program runs to seed")
    args = parser.parse_args(argv)
    if args.url and args.tx_server:
        run(args.url, args.tx_server, args.runs)
        return 0
    with tempfile.TemporaryDirectory() as data, Launched(data) as stack:
        print(f"started a standalone stack: {stack.url}, transactions on {stack.tx_address}")
        run(stack.url, stack.tx_address, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
