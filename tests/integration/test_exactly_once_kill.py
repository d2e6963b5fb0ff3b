"""Exactly once, the hard way: a consume → process → publish loop
(``exactly_once_loop``: a running sum in a transactional table, one output per input)
killed with SIGKILL at random points and started again, many times — in the middle of a
batch, after everything persisted but before the commit, right after the commit, at a
random moment from outside — and, in some rounds, with the transaction server (and the
messaging service) killed with SIGKILL and restarted from their logs. At the end the
output topic holds each input's output exactly once, in input order, and the sum is
exact, as transactional readers see them."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.exactly_once_loop import IN, OUT, SUB
from tests.integration.procs import ServerProcess, TmsServeProcess
from tms.client import MessagingClient
from tms.subscription import Preferences
from txms_common.retry import RetryNTimes
from txn import TransactionContext
from txn.rpc.client import ThriftTxClient
from txn.sqlite_table import SqliteTable

INPUTS = 600
POINTS = ("processing", "persisted", "committed")


class Servers:
    """``txn serve`` (transactions time out after 2 s) and ``tms serve --tx-server``."""

    def __init__(self, root: Path) -> None:
        config = root / "txn.toml"
        config.write_text("[txn]\ndefault_timeout_s = 2\ncleanup_interval_s = 0.5\n")
        self.txn = ServerProcess(root / "txn", "--config", str(config))
        self.tms_dir = root / "tms"
        self.tms: TmsServeProcess | None = None
        self.url = self.tx_address = ""
        self.start()

    def start(self) -> None:
        host, port = self.txn.start()
        self.tx_address = f"{host}:{port}"
        self.tms = TmsServeProcess(self.tms_dir, "--tx-server", self.tx_address)
        self.url = self.tms.start()

    def kill(self) -> None:
        """SIGKILL both (the transaction server first)."""
        self.txn.kill()
        if self.tms is not None:
            self.tms.kill_if_running()


def covered(cut: dict[str, int]) -> bool:
    """Whether every way of cutting a life short was tried at least twice."""
    return all(cut.get(how, 0) >= 2 for how in (*POINTS, "from outside", "servers restarted"))


def run_loop(servers: Servers, state: Path, crash: str | None, kill_after_s: float | None) -> bool:
    """One life of the loop; True if it drained the subscription."""
    command = [
        sys.executable, "-m", "tests.integration.exactly_once_loop",
        "--url", servers.url, "--tx-server", servers.tx_address, "--state", str(state),
        "--batch", "2",
    ] + (["--crash", crash] if crash else [])  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=kill_after_s if kill_after_s is not None else 120)
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGKILL from outside, wherever it is
        proc.communicate()
        return False
    return proc.returncode == 0 and "drained" in out


def committed_outputs(url: str, tx: ThriftTxClient) -> list[bytes]:
    """The output topic as a transactional reader sees it, once no transaction of a
    killed loop holds it any more (they time out and become invalid)."""
    deadline = time.monotonic() + 60
    with MessagingClient(url) as client:
        while True:
            reader = tx.start_short()
            result = client.poll(OUT, transaction=reader, limit=100_000)
            tx.abort(reader)
            if not result.held or time.monotonic() > deadline:
                assert not result.held, "a killed loop's transaction never timed out"
                return [m.payload for m in result.messages]
            time.sleep(0.5)


def test_killed_and_restarted_at_random_points_every_input_counts_once(tmp_path: Path) -> None:
    rng = random.Random(20_181)
    servers = Servers(tmp_path)
    state = tmp_path / "state.db"
    try:
        with MessagingClient(servers.url) as client:
            client.create_topic(IN)
            client.create_topic(OUT)
            client.publish(IN, [str(n) for n in range(INPUTS)])
            client.create_subscription(SUB, Preferences(transactional=True))
        drained = False
        cut: dict[str, int] = {}  # lives cut short, by how
        inputs = INPUTS
        for life in range(300):
            restart_servers = life % 8 == 7
            if life % 4 == 3:
                # SIGKILL from outside, at a random moment (the servers too, every 8th)
                crash, kill_after = None, rng.uniform(0.4, 1.5)
            else:
                crash, kill_after = f"{POINTS[life % 3]}:{rng.randint(1, 12)}", None
            drained = run_loop(servers, state, crash, kill_after)
            if not drained:
                how = crash.partition(":")[0] if crash else "from outside"
                cut[how] = cut.get(how, 0) + 1
            if restart_servers:
                servers.kill()
                servers.start()
                cut["servers restarted"] = cut.get("servers restarted", 0) + 1
            if drained and not covered(cut):
                # Drained before every way of dying was tried (a fast machine): more input.
                with MessagingClient(servers.url) as client:
                    client.publish(IN, [str(n) for n in range(inputs, inputs + INPUTS // 2)])
                inputs += INPUTS // 2
                drained = False
            if drained:
                break
        assert drained, "the loop never got to the end"
        assert covered(cut), cut
        # Then: every output once, in input order; the sum exact
        tx = ThriftTxClient(servers.tx_address, retry=RetryNTimes(2), timeout_s=10)
        try:
            assert committed_outputs(servers.url, tx) == [
                f"out-{n}".encode() for n in range(inputs)
            ]
            table = SqliteTable(state)
            with TransactionContext(tx, table):
                assert table.get(b"sum") == str(sum(range(inputs))).encode()
            table.close()
            with MessagingClient(servers.url) as client:
                lag = client.get_subscription(SUB).lag
                assert lag is not None and lag.messages == 0
        finally:
            tx.close()
    finally:
        servers.kill()
