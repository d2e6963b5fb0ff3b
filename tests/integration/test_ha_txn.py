"""The highly available transaction service on real engines: a 3-node ZooKeeper
ensemble, PostgreSQL, and ``txn serve --zookeeper ... --state ...`` processes killed
with -9 or paused with SIGSTOP (``tests/engines.py``; skipped without the packages)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
import pytest

from txms_common.retry import RetryNTimes, RetryWithBackoff
from txms_testing import ServiceProcess, ZooKeeperEnsemble, txn_command
from txn.cli import main as txn_main
from txn.errors import TxError
from txn.rpc.client import ThriftTxClient
from txn.transaction import Transaction

SESSION_S = 2.0
_bases = itertools.count(1)


@dataclass
class HaCluster:
    zk: ZooKeeperEnsemble
    state_url: str
    base: str
    servers: list[ServiceProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"zk://{self.zk.connect_string}{self.base}"

    def serve(self, name: str) -> ServiceProcess:
        argv = txn_command(
            "serve", "--zookeeper", self.zk.connect_string, "--zk-path", self.base,
            "--state", self.state_url, "--port", "0", "--name", name,
            "--session-timeout-s", str(SESSION_S), log_level="INFO",
        )  # fmt: skip
        proc = ServiceProcess(argv, name).start()
        self.servers.append(proc)
        return proc

    def client(self, **options: object) -> ThriftTxClient:
        retry = RetryWithBackoff(initial_s=0.05, factor=2.0, limit_s=4.0)
        return ThriftTxClient(self.url, retry=retry, timeout_s=10, **options)  # type: ignore[arg-type]

    def epochs(self) -> dict[int, int]:
        """Log chunks stored per epoch."""
        with psycopg.connect(self.state_url) as conn:
            rows = conn.execute("SELECT epoch, count(*) FROM txn_log_chunk GROUP BY epoch")
            return {int(e): int(n) for e, n in rows}


@pytest.fixture
def ha(zk_ensemble: ZooKeeperEnsemble, pg_url: str) -> Iterator[HaCluster]:
    cluster = HaCluster(zk_ensemble, pg_url, f"/test{next(_bases)}/txn")
    yield cluster
    for proc in cluster.servers:
        proc.kill()


def leading(proc: ServiceProcess, since: int = 0, timeout_s: float = 30.0) -> int:
    """Wait for ``proc`` to lead; its epoch."""
    return int(proc.wait_for(r"leading \(epoch (\d+)\)", timeout_s, since).group(1))


def test_one_server_leads_and_txn_leader_names_it(
    ha: HaCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    a = ha.serve("a")
    leading(a)
    b = ha.serve("b")
    b.wait_for("standing by")
    address = a.wait_for(r"listening on ([\d.]+:\d+)").group(1)
    assert txn_main(["leader", "--zookeeper", ha.zk.connect_string, "--zk-path", ha.base]) == 0
    assert capsys.readouterr().out.strip() == address
    with ha.client() as client:
        assert f"{client.host}:{client.port}" == address
        tx = client.start_short()
        client.commit_or_throw(tx)
    assert "leading" not in b.output()  # the standby waits
    assert a.stop() == 0
    leading(b)  # a clean stop hands over too


def test_a_paused_leader_never_appends_after_a_standby_took_over(ha: HaCluster) -> None:
    # Given a leader with committed work, and a standby
    a = ha.serve("a")
    epoch_a = leading(a)
    b = ha.serve("b")
    b.wait_for("standing by")
    host, port = a.wait_for(r"listening on ([\d.]+):(\d+)").groups()
    with ha.client() as client:
        for _ in range(5):
            client.commit_or_throw(client.start_short())
    before = ha.epochs()
    assert before.get(epoch_a, 0) > 0
    # When the leader is paused past its session (every thread of it stopped), with a
    # call waiting in its socket
    direct = ThriftTxClient((host, int(port)), retry=RetryNTimes(1), timeout_s=30)
    try:
        direct.status()  # connected before the pause
        a.pause()
        outcome: list[object] = []

        def call_the_paused_leader() -> None:
            try:
                outcome.append(direct.start_short())
            except TxError as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call_the_paused_leader)
        caller.start()
        epoch_b = leading(b, timeout_s=60)
        assert epoch_b > epoch_a
        with ha.client() as client:
            tx = client.start_short()
            client.commit_or_throw(tx)
        # and then resumed
        mark = len(a.lines)
        a.resume()
        caller.join(60)
        a.wait_for("standing by", 60, since=mark)
    finally:
        direct.close()  # also ends a call still waiting
    # Then it answered nothing (the call reached it only once it was stopped: an answer
    # would need an edit appended under its old epoch) and appended nothing under it
    assert len(outcome) == 1 and isinstance(outcome[0], TxError), (outcome, a.output())
    after = ha.epochs()
    assert after.get(epoch_a, 0) == before[epoch_a]
    assert after.get(epoch_b, 0) > 0


@dataclass
class Record:
    started: list[int] = field(default_factory=list)
    committed: list[Transaction] = field(default_factory=list)
    invalidated: list[int] = field(default_factory=list)
    failures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def cycle(client: ThriftTxClient, worker: int, stop: threading.Event, record: Record) -> None:
    """start -> canCommit -> commit, every 7th transaction invalidated instead."""
    for n in itertools.count():
        if stop.is_set():
            return
        try:
            tx = client.start_short()
            with record.lock:
                record.started.append(tx.transaction_id)
            if n % 7 == 6:
                if client.invalidate(tx.transaction_id):
                    with record.lock:
                        record.invalidated.append(tx.transaction_id)
                continue
            client.can_commit_or_throw(tx, [f"w{worker}-{n}".encode()])
            client.commit_or_throw(tx)
            with record.lock:
                record.committed.append(tx)
        except TxError:
            with record.lock:
                record.failures += 1


def test_failover_under_load_loses_nothing(ha: HaCluster) -> None:
    # Given 16 clients cycling transactions through the leader, and a standby
    a = ha.serve("a")
    leading(a)
    b = ha.serve("b")
    b.wait_for("standing by")
    record, stop = Record(), threading.Event()
    clients = [ha.client() for _ in range(16)]
    workers = [
        threading.Thread(target=cycle, args=(c, i, stop, record)) for i, c in enumerate(clients)
    ]
    for w in workers:
        w.start()
    try:
        time.sleep(1.5)
        # When the leader is killed with -9 mid-load
        with record.lock:
            committed_before = len(record.committed)
        a.kill()
        leading(b, timeout_s=60)
        # and the clients go on until the new leader has served more commits
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with record.lock:
                if len(record.committed) >= committed_before + 200:
                    break
            time.sleep(0.1)
    finally:
        stop.set()
        for w in workers:
            w.join(60)
        for c in clients:
            c.close()
    assert committed_before > 0 and len(record.committed) >= committed_before + 200
    # Then no write pointer was handed out twice
    assert len(set(record.started)) == len(record.started)
    with ha.client() as client:
        probe = client.start_short()
        client.abort(probe)
    # every acknowledged commit is visible to a new transaction
    lost = [tx.transaction_id for tx in record.committed if not probe.is_visible(tx.write_pointer)]
    assert lost == []
    # and every invalidated transaction is still invalid
    assert set(record.invalidated) <= set(probe.invalids)
    assert record.invalidated
