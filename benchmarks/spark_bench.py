"""Spark against the Python client: publishing and reading the same rows, same run, on
Spark ``local[2]`` and on a standalone cluster (a Master and two Workers with one core
each, started from the pyspark package on loopback), plus a streaming tms -> tms query.

The standalone stack (transaction server + messaging service) runs in its own process;
drivers run in this process (client mode). Per phase the report gives rows/s and the CPU
seconds each side used (read from ``/proc``: the server process; the Spark processes,
driver JVM, executors and Python workers; or this process for the client), so that
throughput can be compared per core used: rows per CPU-second of everything involved.

* write: ``N`` rows of 100 bytes by a Spark job (staged per task, one transaction)
  against one Python process publishing them in requests of 1,000, plainly and
  transactionally (store + one marker + commit, as the job does);
* read: the topic into a DataFrame (``noop`` sink) against one process polling it in
  requests of 10,000, transactionally;
* stream: a query copying a topic into another (tms -> tms), over a backlog of ``N``
  rows: in one micro-batch, and in micro-batches of ``N/10`` (``maxOffsetsPerTrigger``),
  first batch and the later ones apart.

    python -m benchmarks.spark_bench [--rows N] [--quick] [--spark local,cluster]
        [--phases write,read,floor,stream] [--no-client] [--protocol http|tms]
        [--no-settle]

Results: ``benchmarks/results/spark.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import spark_floor
from benchmarks.common import new_report, write_report
from benchmarks.cpu_meter import KINDS, CpuMeter
from tms.client import MessagingClient
from tms.model import TopicId
from tms.spark import local_session
from tms.spark.cluster import LocalCluster
from tms.standalone import Launched
from txn.rpc.client import ThriftTxClient

RESULTS = Path(__file__).with_name("results")
PAYLOAD = os.urandom(50) + b"\x00" * 50
BATCH = 1000


def _figures(rows: int, m: dict[str, float]) -> dict[str, Any]:
    cpu = sum(m[k] for k in KINDS)
    return {
        "rows_per_s": round(rows / m["seconds"]),
        "seconds": round(m["seconds"], 2),
        "rows_per_cpu_s": round(rows / cpu) if cpu else 0,
        "cpu_s": round(cpu, 2),
        **{f"{k}_cpu_s": round(m[k], 2) for k in KINDS if abs(m[k]) >= 0.005},
        "load_1min": round(m["load"], 1),
    }


# -- the client ---------------------------------------------------------------------


def client_publish(
    stack: Launched, topic: TopicId, rows: int, *, transactional: bool, url: str | None = None
) -> None:
    client = MessagingClient(url or stack.url)
    tx_client = ThriftTxClient(stack.tx_address)
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
    client.close()
    tx_client.close()


def client_read(stack: Launched, topic: TopicId, rows: int, url: str | None = None) -> None:
    client = MessagingClient(url or stack.url)
    tx_client = ThriftTxClient(stack.tx_address)
    reader = tx_client.start_short()
    seen, start = 0, None
    while True:
        result = client.poll(
            topic, start=start, inclusive=start is None, limit=10_000, transaction=reader
        )
        if not result.messages:
            break
        seen += len(result.messages)
        start = result.messages[-1][0]
    tx_client.abort(reader)
    client.close()
    tx_client.close()
    assert seen == rows, (seen, rows)


# -- Spark --------------------------------------------------------------------------


def endpoint(stack: Launched, protocol: str) -> str:
    """The messaging service's URL for ``protocol``: ``http`` or ``tms`` (binary)."""
    if protocol not in ("http", "tms"):
        raise ValueError(f"unknown protocol {protocol!r}")
    return stack.rpc_url if protocol == "tms" else stack.url


def _options(
    stack: Launched, topic: TopicId, url: str | None = None, **extra: str
) -> dict[str, str]:
    return {
        "url": url or stack.url,
        "txServer": stack.tx_address,
        "namespace": topic.namespace,
        "topic": topic.topic,
        **extra,
    }


def spark_publish(
    spark: Any, stack: Launched, topic: TopicId, rows: int, parts: int, *, url: str | None = None
) -> None:
    from pyspark.sql import functions as sf

    df = spark.range(rows, numPartitions=parts).select(
        sf.lit(PAYLOAD).cast("binary").alias("payload")
    )
    df.write.format("tms").mode("append").options(
        **_options(stack, topic, url, batchSize=str(BATCH))
    ).save()


def floor_write(spark: Any, rows: int, parts: int) -> None:
    """The write job's DataFrame into the ``tmsfloor`` source (``spark_floor``)."""
    from pyspark.sql import functions as sf

    df = spark.range(rows, numPartitions=parts).select(
        sf.lit(PAYLOAD).cast("binary").alias("payload")
    )
    df.write.format("tmsfloor").mode("append").save()


def floor_read(spark: Any, rows: int, parts: int) -> None:
    df = spark.read.format("tmsfloor").options(rows=str(rows), partitions=str(parts)).load()
    df.write.format("noop").mode("overwrite").save()


def spark_read(
    spark: Any, stack: Launched, topic: TopicId, parts: int, url: str | None = None
) -> None:
    df = (
        spark.read.format("tms")
        .options(**_options(stack, topic, url, partitions=str(parts)))
        .load()
    )
    df.write.format("noop").mode("overwrite").save()


def spark_stream(
    spark: Any,
    stack: Launched,
    src: TopicId,
    dst: TopicId,
    parts: int,
    *,
    url: str | None = None,
    **extra: str,
) -> list[tuple[int, float]]:
    """Copy ``src`` into ``dst`` until the backlog is done; (rows, seconds) per batch."""
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            spark.readStream.format("tms")
            .options(**_options(stack, src, url, partitions=str(parts), **extra))
            .load()
            .select("payload")
            .writeStream.format("tms")
            .options(**_options(stack, dst, url))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            query.processAllAvailable()
            progress = list(query.recentProgress)
        finally:
            query.stop()
    return [
        (p["numInputRows"], p["durationMs"]["triggerExecution"] / 1000)
        for p in progress
        if p["numInputRows"]
    ]


def run_spark(
    spark: Any,
    stack: Launched,
    meter: CpuMeter,
    label: str,
    *,
    rows: int,
    parts: int,
    phases: list[str],
    url: str | None = None,
    settle: bool = True,
) -> dict[str, Any]:
    def topic(name: str) -> TopicId:
        t = TopicId("bench", f"{label}-{name}")
        MessagingClient(stack.url).create_topic(t)
        return t

    # Python data source workers start on first use (seconds): warmed up, not timed.
    spark_floor.register(spark)
    warm, warm_dst = topic("warm"), topic("warm-dst")
    spark_publish(spark, stack, warm, 1000, parts, url=url)
    spark_read(spark, stack, warm, parts, url)
    # A fresh JVM compiles its hot paths during the first big jobs (1-1.5 CPU-s here):
    # jobs over as many rows through the floor source, untimed, warm it for all.
    floor_write(spark, rows, parts)
    floor_read(spark, rows, parts)
    out: dict[str, Any] = {}
    written = topic("written")
    every: dict[str, list[tuple[str, Callable[[], None]]]] = {
        "write": [("write", lambda: spark_publish(spark, stack, written, rows, parts, url=url))],
        "read": [("read", lambda: spark_read(spark, stack, written, parts, url))],
        "floor": [
            ("floor write", lambda: floor_write(spark, rows, parts)),
            ("floor read", lambda: floor_read(spark, rows, parts)),
        ],
    }
    jobs = [job for phase in phases for job in every.get(phase, [])]
    for name, job in jobs:
        with meter.measure(settle=settle) as m:
            job()
        key = name if name not in out else f"{name} (again)"
        out[key] = _figures(rows, m)
        print(f"{label}: Spark {key}: {out[key]}", flush=True)
    if "stream" not in phases:
        return out
    spark_stream(spark, stack, warm, warm_dst, parts, url=url)
    for name, extra in (("one batch", {}), ("batches", {"maxOffsetsPerTrigger": str(rows // 10)})):
        src, dst = topic(f"src-{len(out)}"), topic(f"dst-{len(out)}")
        client_publish(stack, src, rows, transactional=False, url=url)
        with meter.measure(settle=settle) as m:
            batches = spark_stream(spark, stack, src, dst, parts, url=url, **extra)
        figures = _figures(rows, m)
        first_rows, first_s = batches[0]
        figures["first_batch_rows_per_s"] = round(first_rows / first_s)
        if len(batches) > 1:
            later = batches[1:]
            figures["later_batches_rows_per_s"] = round(
                sum(r for r, _ in later) / sum(s for _, s in later)
            )
        figures["batches"] = len(batches)
        out[f"stream, {name}"] = figures
        print(f"{label}: stream {name}: {figures}", flush=True)
    return out


def run_client(
    stack: Launched, meter: CpuMeter, rows: int, url: str | None = None, *, settle: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cases: list[tuple[str, Callable[[TopicId], None]]] = [
        ("publish", lambda t: client_publish(stack, t, rows, transactional=False, url=url)),
        (
            "store + one commit",
            lambda t: client_publish(stack, t, rows, transactional=True, url=url),
        ),
    ]
    last = None
    for name, work in cases:
        last = TopicId("bench", f"client-{len(out)}")
        MessagingClient(stack.url).create_topic(last)
        with meter.measure(settle=settle) as m:
            work(last)
        out[name] = _figures(rows, m)
        print(f"client {name}: {out[name]}", flush=True)
    assert last is not None
    with meter.measure(settle=settle) as m:
        client_read(stack, last, rows, url)
    out["poll"] = _figures(rows, m)
    print(f"client poll: {out['poll']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--spark", default="local,cluster", help="local, cluster or both")
    parser.add_argument(
        "--phases", default="write,read,floor,stream", help="which of write, read, floor, stream"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--no-client", action="store_true", help="skip the client's phases (e.g. streams only)"
    )
    parser.add_argument(
        "--protocol", default="http", help="http, or tms (the binary protocol), for all"
    )
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="do not wait for the server's compactions before and after each phase",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "spark.json")
    args = parser.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    parts = args.partitions
    modes = [m.strip() for m in args.spark.split(",") if m.strip()]
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    report: dict[str, Any] = new_report(
        "spark",
        rows=rows,
        row_bytes=len(PAYLOAD),
        partitions=parts,
        batch=BATCH,
        protocol=args.protocol,
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        stack = Launched(Path(tmp) / "data")
        url = endpoint(stack, args.protocol)
        try:
            if not args.no_client:
                report["client"] = run_client(
                    stack, CpuMeter(stack.proc.pid), rows, url, settle=not args.no_settle
                )
            for mode in modes:
                if mode == "local":
                    spark = local_session("txms-bench", master="local[2]")
                    try:
                        report["local[2]"] = run_spark(
                            spark,
                            stack,
                            CpuMeter(stack.proc.pid),
                            "local",
                            rows=rows,
                            parts=parts,
                            phases=phases,
                            url=url,
                            settle=not args.no_settle,
                        )
                    finally:
                        spark.stop()
                elif mode == "cluster":
                    with LocalCluster(Path(tmp) / "cluster") as cluster:
                        os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' too
                        spark = local_session(
                            "txms-bench",
                            master=cluster.master_url,
                            **{"spark.driver.host": "127.0.0.1"},
                        )
                        try:
                            report["cluster 2x1"] = run_spark(
                                spark,
                                stack,
                                CpuMeter(stack.proc.pid, cluster.sessions),
                                "cluster",
                                rows=rows,
                                parts=parts,
                                phases=phases,
                                url=url,
                                settle=not args.no_settle,
                            )
                        finally:
                            spark.stop()
                else:
                    parser.error(f"unknown --spark mode {mode!r}")
        finally:
            stack.stop()
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
