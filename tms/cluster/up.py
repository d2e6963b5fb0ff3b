"""``tms cluster up`` (``make run-cluster``): a whole highly available deployment on this
machine, to try — a 3-node ZooKeeper ensemble, a PostgreSQL cluster, elected ``txn
serve`` instances and ``tms serve`` cluster instances, all on loopback, each engine in a
temporary directory (``txms_testing``: Debian's ``zookeeper`` and ``postgresql``, ``make
system-deps``). It prints the addresses and how to use them, runs until SIGINT or
SIGTERM (Ctrl-C), then stops everything and removes the directories. Nothing here is
for production: docs/operations.md says how to deploy on real machines.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator

from txms_testing import (
    PostgresCluster,
    ServiceProcess,
    ZooKeeperEnsemble,
    free_port,
    txn_command,
)

__all__ = ["run_cluster"]

_ZK_TXN, _ZK_TMS = "/txms/txn", "/txms/tms"


def _tms_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tms.cli", "--log-level", "WARNING", *args]


@contextlib.contextmanager
def _engines() -> Iterator[tuple[ZooKeeperEnsemble, PostgresCluster]]:
    with (
        tempfile.TemporaryDirectory(prefix="txms-cluster-zk-") as root,
        ZooKeeperEnsemble(root) as zk,
        PostgresCluster() as pg,
    ):
        yield zk, pg


def run_cluster(tms: int = 3, txn: int = 2, session_timeout_s: float = 2.0) -> int:
    """Start the topology, print it, wait for a signal, stop it; the exit status."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    procs: list[ServiceProcess] = []
    print("tms cluster: starting ZooKeeper (3 nodes) and PostgreSQL ...", flush=True)
    with _engines() as (zk, pg):
        state = pg.create_database("txms")
        tx_url = f"zk://{zk.connect_string}{_ZK_TXN}"
        try:
            for i in range(txn):
                procs.append(ServiceProcess(txn_command(
                    "serve", "--zookeeper", zk.connect_string, "--zk-path", _ZK_TXN,
                    "--state", state, "--port", "0", "--name", f"txn-{i + 1}",
                    "--session-timeout-s", str(session_timeout_s), log_level="INFO",
                ), f"txn-{i + 1}").start())  # fmt: skip
            urls = []
            for i in range(tms):
                port = free_port()  # kept when restarted: the printed list stays true
                proc = ServiceProcess(_tms_command(
                    "serve", "--port", str(port), "--store", state,
                    "--zookeeper", zk.connect_string, "--zk-path", _ZK_TMS,
                    "--name", f"tms-{i + 1}", "--session-timeout-s", str(session_timeout_s),
                    "--tx-server", tx_url,
                ), f"tms-{i + 1}").start()  # fmt: skip
                procs.append(proc)
                urls.append(proc.wait_for(r"listening on (http://[\d.]+:\d+)", 60).group(1))
            procs[0].wait_for(r"leading|standing by", 60)
            joined = ",".join(urls)
            print(
                "tms cluster: up\n"
                f"  zookeeper    {zk.connect_string}  (txn: {_ZK_TXN}, tms: {_ZK_TMS})\n"
                f"  postgresql   {state}\n"
                f"  transactions {tx_url}\n"
                + "".join(f"  messaging    {url}\n" for url in urls)
                + f"try:\n  tms --url {joined} cluster status\n"
                f"  tms --url {joined} topics create demo t1\n"
                f"  tms --url {joined} publish demo t1 hello\n"
                f"  tms --url {joined} tail demo t1 --from-start --tx-server {tx_url}\n"
                "Ctrl-C stops it all.",
                flush=True,
            )
            while not stop.wait(1.0):
                for proc in procs:
                    if not proc.running:  # restart what died, as a supervisor would
                        print(f"tms cluster: {proc.name} exited; restarting", flush=True)
                        proc.start()
        finally:
            print("tms cluster: stopping ...", flush=True)
            for proc in reversed(procs):
                proc.stop(10)
    print("tms cluster: stopped", flush=True)
    return 0
