"""Invalid-list pruning end to end, with real processes: the messaging service's cleanup
negates an invalid transaction's messages and reports its bound; only the transaction
server's own pruning truncates, and only once every participant has reported — in the
standalone stack (cleanup is an in-process participant) and with ``tms serve`` reporting
to ``txn serve`` over the wire. A participant that has not reported since the server
(re)started blocks truncation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.procs import ServerProcess
from tms.client import MessagingClient
from tms.model import TopicId
from tms.standalone import Launched
from txms_common.retry import RetryNTimes
from txn.rpc.client import ThriftTxClient

T = TopicId("ns", "orders")
LIFETIME_S = 1

TXN_CONFIG = f"""
[txn]
max_lifetime_s = {LIFETIME_S}
prune_enable = true
prune_grace_s = 0
prune_interval_s = 0.2
"""
TMS_CONFIG = f"""
[tms]
tx_max_lifetime_s = {LIFETIME_S}
cleanup_interval_s = 0.2
cleanup_grace_s = 0
"""


def eventually(check: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def publish_with_an_invalid_transaction(tx: ThriftTxClient, messaging: MessagingClient) -> int:
    """Publish one message in a transaction and invalidate it; return its id."""
    messaging.create_topic(T)
    bad = tx.start_short()
    messaging.publish(T, ["never visible"], tx_write_pointer=bad.write_pointer)
    assert tx.invalidate(bad.transaction_id)
    good = tx.start_short()
    messaging.publish(T, ["committed"], tx_write_pointer=good.write_pointer)
    tx.commit_or_throw(good)
    return bad.transaction_id


def transactional_view(tx: ThriftTxClient, messaging: MessagingClient) -> list[bytes]:
    reader = tx.start_short()
    try:
        return [m.payload for m in messaging.poll(T, transaction=reader).messages]
    finally:
        tx.abort(reader)


def test_the_standalone_stack_prunes_only_what_every_participant_cleaned(
    tmp_path: Path,
) -> None:
    config = tmp_path / "standalone.toml"
    # The standalone's own cleanup participates in process; "app" stands for an
    # application store in another process
    config.write_text(TXN_CONFIG + 'prune_participants = ["app"]\n' + TMS_CONFIG)
    with Launched(tmp_path / "data", "--config", str(config)) as stack:
        tx = ThriftTxClient(stack.tx_address, retry=RetryNTimes(2), timeout_s=10)
        messaging = MessagingClient(stack.url, retries=1, backoff_s=0.05)
        try:
            # Given a transaction that published and was invalidated
            bad = publish_with_an_invalid_transaction(tx, messaging)
            # When it is past its lifetime and cleanup has run (negated its message)
            time.sleep(LIFETIME_S + 1.5)
            # Then it stays in the invalid list while "app" has not reported
            assert tx.invalid_size() == 1
            assert transactional_view(tx, messaging) == [b"committed"]
            # When "app" reports that it holds nothing of it
            tx.report_prune_upper_bound("app", bad)
            # Then the manager's scheduled pruning truncates it
            assert eventually(lambda: tx.invalid_size() == 0)
            # and its message, negated by cleanup, stays invisible to transactions
            assert transactional_view(tx, messaging) == [b"committed"]
        finally:
            tx.close()
            messaging.close()


_HTTP = re.compile(r"listening on (http://[\d.]+:\d+)")


@pytest.fixture
def tms_serve(tmp_path: Path) -> Iterator[Callable[[tuple[str, int]], str]]:
    procs: list[subprocess.Popen[str]] = []

    def start(tx_address: tuple[str, int]) -> str:
        """(Re)start tms serve, reporting to ``tx_address``."""
        for old in procs:
            if old.poll() is None:
                old.kill()  # its transaction server is gone: no clean stop to wait for
                old.wait(10)
        config = tmp_path / "tms.toml"
        config.write_text(TMS_CONFIG)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tms.cli", "--log-level", "WARNING", "serve",
             "--data-dir", str(tmp_path / "tms"), "--port", "0", "--config", str(config),
             "--tx-server", f"{tx_address[0]}:{tx_address[1]}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = _HTTP.search(proc.stdout.readline())
            if match:
                return match.group(1)
        raise RuntimeError("tms serve did not start")

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_tms_serve_reports_over_the_wire_and_a_restart_keeps_the_participants(
    tmp_path: Path, tms_serve: Callable[[tuple[str, int]], str]
) -> None:
    config = tmp_path / "txn.toml"
    config.write_text(TXN_CONFIG + 'prune_participants = ["tms", "app"]\n')
    server = ServerProcess(tmp_path / "txn", "--config", str(config))
    try:
        address = server.start()
        url = tms_serve(address)
        tx = ThriftTxClient(address, retry=RetryNTimes(2), timeout_s=10)
        messaging = MessagingClient(url, retries=1, backoff_s=0.05)
        try:
            # Given an invalid transaction's message, and "app" reporting it clean
            bad = publish_with_an_invalid_transaction(tx, messaging)
            time.sleep(LIFETIME_S + 0.2)
            tx.report_prune_upper_bound("app", bad)
            # When tms serve's cleanup has negated the message and reported over the wire
            # Then the transaction server prunes it
            assert eventually(lambda: tx.invalid_size() == 0)
            assert transactional_view(tx, messaging) == [b"committed"]

            # Given a second invalid transaction, and the transaction server restarted
            second = tx.start_short()
            tx.invalidate(second.transaction_id)
            tx.close()
            assert server.terminate() == 0
            address = server.start()
            tms_serve(address)  # now reporting to the restarted server
            tx = ThriftTxClient(address, retry=RetryNTimes(2), timeout_s=10)
            time.sleep(LIFETIME_S + 1.5)  # tms serve's cleanup reports meanwhile
            # Then "app", silent since the restart, blocks pruning
            assert tx.invalid_size() == 1
            tx.report_prune_upper_bound("app", second.transaction_id)
            assert eventually(lambda: tx.invalid_size() == 0)
        finally:
            tx.close()
            messaging.close()
    finally:
        server.kill()
