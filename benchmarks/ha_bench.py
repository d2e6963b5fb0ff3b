"""The highly available transaction service: what PostgreSQL state costs, and how long a
failover takes.

* cycles: durable full cycles per second (``start_short`` + ``can_commit`` + ``commit``)
  from 16 client connections, against ``txn serve`` with its state on the local log
  and against an elected ``txn serve --zookeeper ... --state postgresql://...``, in the
  same run, alternately (A B A B ...), on one throwaway PostgreSQL cluster (fsync on)
  and a 3-node ZooKeeper ensemble on this machine;
* failover: two elected servers (2 s ZooKeeper session); a client cycles through the
  leader; the leader is killed with -9, ``kills`` times (the killed one is restarted as
  the standby); each time, the time from the kill to the client's first commit
  through the new leader. The target is <= 5 s with a 2 s session.

    python -m benchmarks.ha_bench [--quick] [--seconds S] [--rounds N] [--kills K] [--out FILE]

Results go to ``benchmarks/results/ha.json`` and are printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import new_report, write_report
from benchmarks.txn_bench import _drive_clients
from txms_testing import PostgresCluster, ServiceProcess, ZooKeeperEnsemble, txn_command

RESULTS = Path(__file__).with_name("results")
_LISTENING = r"listening on ([\d.]+):(\d+)"


def _address(proc: ServiceProcess, since: int = 0, timeout_s: float = 60) -> tuple[str, int]:
    match = proc.wait_for(_LISTENING, timeout_s, since)
    return match.group(1), int(match.group(2))


def _elected(
    zk: ZooKeeperEnsemble, state_url: str, name: str, session_s: float, base: str
) -> ServiceProcess:
    return ServiceProcess(
        txn_command(
            "serve", "--zookeeper", zk.connect_string, "--zk-path", base, "--state", state_url,
            "--port", "0", "--name", name, "--session-timeout-s", str(session_s),
            log_level="INFO",
        ),
        name,
    ).start()  # fmt: skip


def _cycles(
    root: Path, zk: ZooKeeperEnsemble, pg: PostgresCluster, seconds: float, rounds: int
) -> dict[str, Any]:
    local = ServiceProcess(txn_command("serve", "--data-dir", str(root / "local"), "--port", "0"))
    elected = _elected(zk, pg.create_database("cycles"), "cycles", 10.0, "/bench/cycles")
    try:
        addresses = {"local": _address(local.start()), "postgresql": _address(elected)}
        runs: dict[str, list[float]] = {"local": [], "postgresql": []}
        for r in range(rounds):
            for name in ("local", "postgresql") if r % 2 == 0 else ("postgresql", "local"):
                result = _drive_clients("cycle", addresses[name], 16, seconds)
                runs[name].append(result["per_second"])
                print(f"  round {r + 1} {name:>10}: {result['per_second']:8.1f} cycles/s")
    finally:
        local.stop()
        elected.stop()
    medians = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "clients": 16,
        "seconds_per_run": seconds,
        "runs": runs,
        "median": medians,
        "postgresql_over_local": round(medians["postgresql"] / medians["local"], 3),
    }


def _holder(url: str) -> str:
    """The name of the server holding the current epoch."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT holder FROM txn_leader WHERE id = 1").fetchone()
    return str(row[0]) if row else ""


def _failover(zk: ZooKeeperEnsemble, pg: PostgresCluster, kills: int) -> dict[str, Any]:
    from txms_common.retry import RetryWithBackoff
    from txn.errors import TxError
    from txn.rpc.client import ThriftTxClient

    session_s = 2.0
    url = pg.create_database("failover")
    servers = [_elected(zk, url, name, session_s, "/bench/failover") for name in ("a", "b")]
    client = ThriftTxClient(
        f"zk://{zk.connect_string}/bench/failover",
        retry=RetryWithBackoff(initial_s=0.05, factor=2.0, limit_s=2.0),
        timeout_s=10,
    )
    stop = threading.Event()
    commits: list[float] = []  # monotonic times of acknowledged commits

    def cycle() -> None:
        while not stop.is_set():
            try:
                tx = client.start_short()
                client.can_commit_or_throw(tx, [b"k"])
                client.commit_or_throw(tx)
                commits.append(time.monotonic())
            except TxError:
                pass

    times: list[float] = []
    driver = threading.Thread(target=cycle)
    try:
        for s in servers:
            s.wait_for("standing by", 60)
        deadline = time.monotonic() + 60
        while not any("leading" in s.output(400) for s in servers):
            if time.monotonic() > deadline:
                raise RuntimeError("no server leads:\n" + "".join(s.output() for s in servers))
            time.sleep(0.05)
        driver.start()
        for k in range(kills):
            time.sleep(1.0)
            leader = next(s for s in servers if s.name == _holder(url))
            standby = next(s for s in servers if s is not leader)
            mark = len(standby.lines)
            killed_at = time.monotonic()
            leader.kill()
            standby.wait_for("leading", 60, since=mark)
            while not commits or commits[-1] <= killed_at:
                time.sleep(0.005)
            took = next(t for t in commits if t > killed_at) - killed_at
            times.append(round(took, 3))
            print(f"  kill {k + 1}: first commit through the new leader after {took:.2f} s")
            servers[servers.index(leader)] = replacement = _elected(
                zk, url, leader.name, session_s, "/bench/failover"
            )
            replacement.wait_for("standing by", 60)
    finally:
        stop.set()
        if driver.is_alive():
            driver.join(60)
        client.close()
        for s in servers:
            s.kill()
    ordered = sorted(times)
    return {
        "session_timeout_s": session_s,
        "kills": len(times),
        "seconds": times,
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
        "within_5s": sum(1 for t in ordered if t <= 5.0),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 s runs, 2 rounds, 5 kills")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--out", type=Path, default=RESULTS / "ha.json")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds, args.kills = 2.0, 2, 5
    report = new_report("ha", quick=args.quick)
    with (
        tempfile.TemporaryDirectory(prefix="txms-ha-bench-") as tmp,
        PostgresCluster() as pg,
        ZooKeeperEnsemble(Path(tmp) / "zk") as zk,
    ):
        print("cycles/s, 16 clients: state on the local log vs in PostgreSQL")
        report["cycles"] = _cycles(Path(tmp), zk, pg, args.seconds, args.rounds)
        print(f"failover, {args.kills} kills -9 of the leader (2 s session)")
        report["failover"] = _failover(zk, pg, args.kills)
    c, f = report["cycles"], report["failover"]
    print(
        f"cycles/s median: local {c['median']['local']:.0f}, postgresql "
        f"{c['median']['postgresql']:.0f} ({c['postgresql_over_local']:.2f} x)\n"
        f"failover s: min {f['min']}, median {f['median']}, p90 {f['p90']}, max {f['max']}, "
        f"{f['within_5s']}/{f['kills']} within 5 s"
    )
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
