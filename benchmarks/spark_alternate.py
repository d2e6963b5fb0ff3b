"""The server's CPU for a Spark write against the client's, alternating on one stack.

``spark_bench`` runs the client's phases first and Spark's after them, so Spark's write
meets a store that already holds the client's rows. This runs a Spark write
(``local[2]``) and the client's ``store`` + marker + commit alternately, ``--rounds``
times, ``--rows`` each, on one standalone stack and one Spark session, and prints the
CPU seconds per 10^6 rows of each kind of process (``benchmarks.cpu_meter``):

    python -m benchmarks.spark_alternate [--rows N] [--rounds R] [--masters local[1],local[2]]
        [--clients 1,2] [--protocol http|tms|http,tms] [--probe] [--config FILE]
        [--conf KEY=VALUE ...]

With several masters each round writes through each in turn (a session each), then the
clients. The master ``cluster`` is a standalone cluster of a Master and two Workers with one
core each (``tms.spark.cluster``), started once for the run; its JVMs and Python workers
are counted apart (driver, executors, daemons, workers). The clients (``--clients 1,2``:
one writer, then two at once, a transaction each;
``--masters ''``: no Spark). ``--protocol tms``: both write over the binary protocol;
``http,tms``: every round writes over each in turn.
``--probe`` runs the server under ``benchmarks.server_probe`` and prints, per write,
what the server saw: CPU seconds per thread (LevelDB's compaction thread apart),
LevelDB's compactions (seconds, MB read and written), connections, requests per route,
request bodies and the most requests in flight at once.
``--config``: the standalone stack's TOML config file (e.g. a ``[tms]`` table with
``leveldb_write_buffer_mb``). ``--conf``: a Spark setting for every session.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import spark_bench
from benchmarks.cpu_meter import KINDS, CpuMeter
from benchmarks.server_probe import MODULE, Probe
from tms.client import MessagingClient
from tms.model import TopicId
from tms.spark import local_session
from tms.spark.cluster import LocalCluster
from tms.standalone import Launched

CLUSTER = "cluster"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--masters", default="local[2]", help="Spark masters, each in its turn (local[1],...)"
    )
    parser.add_argument(
        "--clients",
        default="1",
        help="the client's writes, each in its turn: 1 (one writer), 2 (two at once), ...",
    )
    parser.add_argument(
        "--protocol", default="http", help="http or tms (binary); http,tms: each in its turn"
    )
    parser.add_argument("--probe", action="store_true", help="what the server saw, per write")
    parser.add_argument("--config", help="the standalone stack's TOML config file")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for every session (e.g. "
        "spark.sql.execution.arrow.maxRecordsPerBatch=100000); may be repeated",
    )
    args = parser.parse_args(argv)
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    clients = [
        "client" if c.strip() == "1" else f"client{c.strip()}" for c in args.clients.split(",")
    ]
    extra = ["--config", args.config] if args.config else []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        probe = None
        if args.probe:
            (Path(tmp) / "probe").mkdir()
            probe = Probe(Path(tmp) / "probe")
            stack = Launched(
                Path(tmp) / "data",
                *extra,
                module=MODULE,
                env={"TXMS_PROBE_DIR": str(probe.directory)},
            )
        else:
            stack = Launched(Path(tmp) / "data", *extra)
        protocols = [p.strip() for p in args.protocol.split(",") if p.strip()]
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(stack.stop)
            cluster = None
            if CLUSTER in masters:
                cluster = cleanup.enter_context(LocalCluster(Path(tmp) / "cluster"))
            sessions: dict[str, Any] = {}
            cleanup.callback(lambda: [s.stop() for s in sessions.values()])
            start = _starter(cluster, dict(c.split("=", 1) for c in args.conf))
            sessions.update({m: start(m) for m in masters[:1]})
            for i in range(args.rounds):
                for protocol in protocols:
                    url = spark_bench.endpoint(stack, protocol)
                    label = str(i) if len(protocols) == 1 else f"{i} {protocol}"
                    for who in [*masters, *clients]:
                        meter = CpuMeter(
                            stack.proc.pid,
                            cluster.sessions if cluster is not None and who == CLUSTER else None,
                        )
                        _one(
                            stack,
                            sessions,
                            start,
                            who,
                            rows=args.rows,
                            i=label,
                            url=url,
                            probe=probe,
                            meter=meter,
                        )
    return 0


def _starter(cluster: LocalCluster | None, conf: dict[str, str]) -> Callable[[str], Any]:
    """Starts a Spark session with ``conf`` on a master (``cluster``: on the standalone
    cluster)."""

    def start(master: str) -> Any:
        if master != CLUSTER:
            return local_session(f"txms-bench-{master}", master=master, **conf)
        assert cluster is not None
        os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' too
        return local_session(
            "txms-bench-cluster",
            master=cluster.master_url,
            **{"spark.driver.host": "127.0.0.1", **conf},
        )

    return start


def _one(
    stack: Launched,
    sessions: dict[str, Any],
    start: Callable[[str], Any],
    who: str,
    *,
    rows: int,
    i: str,
    url: str,
    probe: Probe | None,
    meter: CpuMeter,
) -> None:
    """One write of ``rows`` by ``who`` (a master, or the client), measured and printed.
    One session at a time: another master's stops the one before."""
    tag = f"{who}-{i}".replace("[", "").replace("]", "").replace(" ", "-")
    topic = TopicId("bench", tag)
    MessagingClient(stack.url).create_topic(topic)
    spark = None
    if not who.startswith("client"):
        if who not in sessions:
            for old in sessions.values():
                old.stop()
            sessions.clear()
            sessions[who] = start(who)
        spark = sessions[who]
        warm = TopicId("bench", f"warm-{tag}")
        MessagingClient(stack.url).create_topic(warm)
        spark_bench.spark_publish(spark, stack, warm, 1000, 4, url=url)  # its workers started
    meter.settle()  # the compactions of the writes before are theirs
    before = probe.snapshot() if probe is not None else None
    with meter.measure() as m:
        started = time.perf_counter()
        if spark is not None:
            spark_bench.spark_publish(spark, stack, topic, rows, 4, url=url)
        else:
            _clients(stack, topic, rows, int(who[6:] or 1), url)
        seconds = time.perf_counter() - started
        settled = meter.settle()  # and this write's are its own
    if probe is not None and before is not None:
        _print_probe(who, i, rows, Probe.delta(before, probe.snapshot()))
    per = {k: round(m[k] * 1e6 / rows, 2) for k in KINDS if m[k] >= 0.005}
    print(
        f"round {i} {who}: CPU-s per 10^6 rows {per}, "
        f"{rows / seconds:,.0f} rows/s, then {settled:.0f} s to settle, load {m['load']:.1f}",
        flush=True,
    )


def _clients(stack: Launched, topic: TopicId, rows: int, writers: int, url: str) -> None:
    """``rows`` written by ``writers`` clients at once, a transaction each (as Spark's
    concurrent tasks store under write pointers of their own)."""
    threads = [
        threading.Thread(
            target=spark_bench.client_publish,
            args=(stack, topic, rows // writers),
            kwargs={"transactional": True, "url": url},
        )
        for _ in range(writers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _print_probe(who: str, i: str, rows: int, d: dict[str, Any]) -> None:
    per = 1e6 / rows
    threads = {k: round(v * per, 2) for k, v in sorted(d["threads"].items()) if v >= 0.005}
    ldb = d["leveldb"]
    http = d["http"]
    print(
        f"  probe {who}-{i}, per 10^6 rows: threads CPU-s {threads}; LevelDB compactions "
        f"{ldb['compaction_s'] * per:.2f} s, read {ldb['compaction_read_mb'] * per:.0f} MB, "
        f"written {ldb['compaction_write_mb'] * per:.0f} MB, level-0 files "
        f"{ldb['level0_files']}; connections {http['connections']}, requests "
        f"{http['requests']}, bodies {http['bodies']} ({http['body_bytes'] / 1e6:.1f} MB, "
        f"{http['body_sizes']}), at most {http['max_in_flight']} in flight",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
