"""Messaging on PostgreSQL and in a cluster: what the shared store costs, what one
instance's CPU buys, and how long a topic's writes stop when its owner dies.

* throughput: in-process ``MessagingService`` publishing 100-byte messages on LevelDB
  (local disk) and on PostgreSQL (a throwaway cluster on this machine, fsync and
  ``synchronous_commit`` on), the same workloads alternately (A B B A ...): one message
  per request from 16 threads on one topic, 100 per request from 4 threads, one per
  request on 16 topics at once;
* raw: what PostgreSQL itself does here, on one connection: single-row autocommit
  inserts (commits/s) beside ``write`` + ``fdatasync`` of a file; rows/s loading
  400-row batches (as a 100-message publish from 4 threads makes) by ``INSERT ... SELECT
  FROM unnest`` with ``ON CONFLICT DO UPDATE`` and without (what the store sends for
  appended rows), by ``COPY`` straight into the table, and by ``COPY`` into a staging
  table then ``INSERT ... ON CONFLICT``;
* cpu: one ``tms serve --store postgresql://... --zookeeper ...`` instance, 8 client
  threads publishing 10 messages per request over HTTP for ``seconds``; the instance's
  CPU and PostgreSQL's (every backend of its cluster) per 1,000 messages, read from
  /proc; from them, a projection of throughput for N instances (each with its own
  CPU) against one PostgreSQL server with ``--pg-cores`` cores;
* failover: two instances (2 s ZooKeeper session); a client publishes one message per
  request through both URLs; the topic's owner is killed with -9, ``kills`` times (and
  restarted once the next publish is acknowledged); each time, the time from the kill to
  the acknowledgement of the first publish sent after it.

    python -m benchmarks.cluster_bench [--quick] [--seconds S] [--rounds N] [--kills K]
                                       [--parts throughput,raw,cpu,failover] [--out FILE]

Results: ``benchmarks/results/cluster.json``; figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import new_report, run_threads, write_report
from tms.client import MessagingClient
from tms.errors import TmsError
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.kv import KeyValueStore
from tms.store.leveldb import LevelDBStore
from tms.store.postgres import PostgresStore
from txms_testing import PostgresCluster, ServiceProcess, ZooKeeperEnsemble, free_port

RESULTS = Path(__file__).with_name("results")
PAYLOAD = os.urandom(50) + b"\x00" * 50
_TICK = os.sysconf("SC_CLK_TCK")
_names = itertools.count(1)

WORKLOADS = {  # name -> (messages per request, threads, topics)
    "1 msg x 16 threads": (1, 16, 1),
    "100 msgs x 4 threads": (100, 4, 1),
    "1 msg x 16 topics": (1, 16, 16),
}


def _publish_rate(
    store: KeyValueStore, batch: int, threads: int, topics: int, seconds: float
) -> float:
    svc = MessagingService(store)
    requests = []
    for i in range(topics):
        topic = TopicId("bench", f"t{i}")
        svc.create_topic(topic)
        requests.append(StoreRequest(topic, [PAYLOAD] * batch))

    def work(i: int) -> int:
        svc.publish(requests[i % topics])
        return batch

    try:
        return run_threads(threads, seconds, work).per_second
    finally:
        svc.close()


def throughput(pg: PostgresCluster, root: Path, seconds: float, rounds: int) -> dict[str, Any]:
    engines: dict[str, Callable[[], KeyValueStore]] = {
        "leveldb": lambda: LevelDBStore(root / f"db{next(_names)}"),
        "postgresql": lambda: PostgresStore(pg.create_database(f"tp{next(_names)}")),
    }
    result: dict[str, Any] = {}
    for name, (batch, threads, topics) in WORKLOADS.items():
        runs: dict[str, list[float]] = {"leveldb": [], "postgresql": []}
        for r in range(rounds):
            for engine in ("leveldb", "postgresql") if r % 2 == 0 else ("postgresql", "leveldb"):
                rate = _publish_rate(engines[engine](), batch, threads, topics, seconds)
                runs[engine].append(round(rate))
                print(f"  {name:>22} round {r + 1} {engine:>10}: {rate:9.0f} msg/s", flush=True)
        medians = {k: statistics.median(v) for k, v in runs.items()}
        result[name] = {
            "runs": runs,
            "median": medians,
            "postgresql_over_leveldb": round(medians["postgresql"] / medians["leveldb"], 3),
        }
    return result


_UPSERT = "INSERT INTO raw (t, k, v) SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::bytea[])"


def raw(pg: PostgresCluster, seconds: float, rounds: int) -> dict[str, Any]:
    import psycopg

    conn = psycopg.connect(pg.create_database("raw"), autocommit=True)
    conn.execute("CREATE TABLE raw (t bytea, k bytea, v bytea, PRIMARY KEY (t, k))")
    conn.execute("CREATE TABLE one (k bigint PRIMARY KEY, v bytea)")
    conn.execute("CREATE TEMP TABLE stage (t bytea, k bytea, v bytea)")
    keys = itertools.count()

    def batch() -> list[tuple[bytes, bytes, bytes]]:
        return [(b"m", b"%020d" % next(keys), PAYLOAD) for _ in range(400)]

    def arrays(rows: list[tuple[bytes, bytes, bytes]]) -> tuple[list[bytes], ...]:
        return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]

    def copy(rows: list[tuple[bytes, bytes, bytes]], table: str) -> None:
        with conn.cursor().copy(f"COPY {table} (t, k, v) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["bytea", "bytea", "bytea"])
            for row in rows:
                cp.write_row(row)

    def upsert() -> int:
        with conn.transaction():
            conn.execute(
                _UPSERT + " ON CONFLICT (t, k) DO UPDATE SET v = EXCLUDED.v", arrays(batch())
            )
        return 400

    def insert() -> int:
        with conn.transaction():
            conn.execute(_UPSERT, arrays(batch()))
        return 400

    def copy_direct() -> int:
        with conn.transaction():
            copy(batch(), "raw")
        return 400

    def copy_staged() -> int:
        with conn.transaction():
            copy(batch(), "stage")
            conn.execute(
                "INSERT INTO raw SELECT * FROM stage "
                "ON CONFLICT (t, k) DO UPDATE SET v = EXCLUDED.v"
            )
            conn.execute("TRUNCATE stage")
        return 400

    def single() -> int:
        conn.execute("INSERT INTO one VALUES (%s, %s)", (next(keys), PAYLOAD))
        return 1

    probe = Path(pg.dir) / "fsync-probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT)

    def fdatasync() -> int:
        os.write(fd, PAYLOAD)
        os.fdatasync(fd)
        return 1

    cases: dict[str, Callable[[], int]] = {
        "autocommit single-row insert (commits/s)": single,
        "write + fdatasync of a file (/s)": fdatasync,
        "400 rows: unnest, ON CONFLICT (rows/s)": upsert,
        "400 rows: unnest, plain insert (rows/s)": insert,
        "400 rows: COPY into the table (rows/s)": copy_direct,
        "400 rows: COPY to staging + INSERT ON CONFLICT (rows/s)": copy_staged,
    }
    result: dict[str, Any] = {}
    try:
        for r in range(rounds):
            for name, fn in cases.items() if r % 2 == 0 else reversed(cases.items()):
                rate = run_threads(1, seconds, lambda _i, fn=fn: fn()).per_second
                result.setdefault(name, []).append(round(rate))
                print(f"  round {r + 1} {name}: {rate:9.0f}", flush=True)
    finally:
        os.close(fd)
        conn.close()
    return {
        name: {"runs": runs, "median": statistics.median(runs)} for name, runs in result.items()
    }


def _cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _instance(zk: ZooKeeperEnsemble, url: str, name: str, base: str) -> tuple[ServiceProcess, str]:
    """A ``tms serve`` cluster instance on a port of its own (kept when it is restarted:
    the clients hold the list of URLs)."""
    proc = ServiceProcess(
        [
            sys.executable, "-m", "tms.cli", "--log-level", "WARNING", "serve",
            "--port", str(free_port()),
            "--store", url, "--zookeeper", zk.connect_string, "--zk-path", base,
            "--name", name, "--session-timeout-s", "2",
        ],
        name,
    ).start()  # fmt: skip
    return proc, proc.wait_for(r"listening on (http://[\d.]+:\d+)", 60).group(1)


def cpu(
    zk: ZooKeeperEnsemble, pg: PostgresCluster, seconds: float, pg_cores: int
) -> dict[str, Any]:
    proc, url = _instance(zk, pg.create_database("cpu"), "cpu", "/bench/cpu")
    topic = TopicId("bench", "cpu")
    clients = [MessagingClient(url) for _ in range(8)]
    try:
        clients[0].create_topic(topic)
        clients[0].publish(topic, [PAYLOAD])  # claimed, writer open
        backends = _children(pg.pid)
        before = (_cpu_s([proc.pid]), _cpu_s(backends))

        def work(i: int) -> int:
            clients[i].publish(topic, [PAYLOAD] * 10)
            return 10

        run = run_threads(8, seconds, work)
        after = (_cpu_s([proc.pid]), _cpu_s(_children(pg.pid)))
    finally:
        for c in clients:
            c.close()
        proc.stop()
    per_1000 = {
        "instance_cpu_s": round((after[0] - before[0]) / run.items * 1000, 4),
        "postgresql_cpu_s": round((after[1] - before[1]) / run.items * 1000, 4),
    }
    rate = run.per_second
    instance_bound = 1000 / per_1000["instance_cpu_s"] if per_1000["instance_cpu_s"] else 0.0
    pg_bound = (
        pg_cores * 1000 / per_1000["postgresql_cpu_s"] if per_1000["postgresql_cpu_s"] else 0.0
    )
    projection = {n: round(min(n * instance_bound, pg_bound)) for n in (1, 2, 4, 8, 16)}
    print(f"  {rate:.0f} msg/s through one instance; CPU per 1,000 messages: {per_1000}")
    print(f"  projection (one core per instance, PostgreSQL on {pg_cores} cores): {projection}")
    return {
        "clients": 8,
        "messages_per_request": 10,
        "messages_per_second": round(rate),
        "cpu_per_1000_messages": per_1000,
        "projection_messages_per_second": projection,
        "pg_cores": pg_cores,
    }


def failover(zk: ZooKeeperEnsemble, pg: PostgresCluster, kills: int) -> dict[str, Any]:
    url = pg.create_database("failover")
    base = "/bench/failover"
    instances = {name: _instance(zk, url, name, base) for name in ("a", "b")}
    topic = TopicId("bench", "failover")
    client = MessagingClient([u for _p, u in instances.values()], timeout_s=10, backoff_s=0.02)
    stop = threading.Event()
    acked: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic

    def publish() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                client.publish(topic, [PAYLOAD])
                acked.append((sent, time.monotonic()))
            except TmsError:
                time.sleep(0.01)

    times: list[float] = []
    driver = threading.Thread(target=publish)
    try:
        client.create_topic(topic)
        driver.start()
        for k in range(kills):
            time.sleep(1.0)
            owner = client.cluster()["owners"]["bench.failover"]
            proc, _url = instances[owner]
            killed_at = time.monotonic()
            proc.kill()
            # the first publish sent after the kill and acknowledged (one in flight at
            # the kill may still be answered by the dying owner)
            while not acked or acked[-1][0] <= killed_at:
                if time.monotonic() - killed_at > 120:
                    raise RuntimeError(f"no publish acknowledged after killing {owner}")
                time.sleep(0.005)
            took = next(done for sent, done in acked if sent > killed_at) - killed_at
            times.append(round(took, 3))
            print(f"  kill {k + 1} ({owner}): next publish acknowledged after {took:.2f} s")
            proc.start()
            proc.wait_for("listening on", 60)
    finally:
        stop.set()
        if driver.is_alive():
            driver.join(30)
        client.close()
        for proc, _url in instances.values():
            proc.kill()
    return {
        "session_timeout_s": 2.0,
        "kills": kills,
        "seconds": times,
        "median_s": statistics.median(times),
        "max_s": max(times),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--pg-cores", type=int, default=8)
    parser.add_argument("--parts", default="throughput,raw,cpu,failover")
    parser.add_argument("--out", type=Path, default=RESULTS / "cluster.json")
    args = parser.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    rounds = args.rounds or (2 if args.quick else 6)
    kills = args.kills or (5 if args.quick else 20)
    parts = set(args.parts.split(","))
    report = new_report("cluster", seconds=seconds, rounds=rounds)
    with (
        tempfile.TemporaryDirectory(prefix="cluster-bench-zk-") as root,
        ZooKeeperEnsemble(root) as zk,
        PostgresCluster() as pg,
    ):
        if "throughput" in parts:
            print("publish throughput, LevelDB vs PostgreSQL (alternately):")
            report["throughput"] = throughput(pg, Path(root), seconds, rounds)
        if "raw" in parts:
            print("PostgreSQL alone, one connection:")
            report["raw"] = raw(pg, seconds, rounds)
        if "cpu" in parts:
            print("one instance's CPU per 1,000 messages:")
            report["cpu"] = cpu(zk, pg, seconds * 2, args.pg_cores)
        if "failover" in parts:
            print(f"failover over {kills} kills of the owner:")
            report["failover"] = failover(zk, pg, kills)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
