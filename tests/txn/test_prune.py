"""Tephra's TransactionPruningServiceTest, on TransactionPruner; participants reporting
over the wire (named in the configuration), and the pruning schedule."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.fakes import FakeClock
from tests.txn.harness import SYSTEM_CONFIG, in_process_system, thrift_system
from txms_common.retry import RetryNTimes
from txn.config import ServerConfig
from txn.errors import InvalidArgumentError
from txn.inmemory import manager_pruner
from txn.prune import PruningService, ReportedBounds, TransactionPruner, inactive_tx_bound
from txn.rpc.client import ThriftTxClient
from txn.rpc.handler import TephraHandler
from txn.rpc.server import ServerThread, new_server

N = 1_000_000


class RecordingPlugin:
    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.asked: list[tuple[int, int]] = []
        self.completed: list[tuple[int, int]] = []

    def fetch_prune_upper_bound(self, now_ms: int, inactive_tx_bound: int) -> int:
        self.asked.append((now_ms, inactive_tx_bound))
        return self.bound

    def prune_complete(self, now_ms: int, max_pruned_invalid: int) -> None:
        self.completed.append((now_ms, max_pruned_invalid))


class FixedInvalidsClient:
    """Hands out a transaction whose invalid list is given; records truncations."""

    def __init__(self, invalids: tuple[int, ...]) -> None:
        from txn.transaction import Transaction

        self.tx = Transaction(
            transaction_id=10**18, read_pointer=1, invalids=invalids, write_pointer=10**18
        )
        self.truncated: list[list[int]] = []

    def start_short(self, timeout_s: int | None = None):  # type: ignore[no-untyped-def]
        return self.tx

    def abort(self, tx: object) -> None:
        pass

    def truncate_invalid_tx(self, tx_ids: list[int]) -> bool:
        self.truncated.append(sorted(tx_ids))
        return True


def test_inactive_bound_is_tephras() -> None:
    assert inactive_tx_bound(120_000, 10_000) == 110_000 * N - 1


def test_prunes_up_to_the_smallest_plugin_bound() -> None:
    clock = FakeClock(220_000)
    invalids = (40 * N, 50 * N, 60 * N, 75 * N, 80 * N)
    client = FixedInvalidsClient(invalids)
    p1, p2 = RecordingPlugin(60 * N), RecordingPlugin(70 * N)
    pruner = TransactionPruner(client, [p1, p2], max_lifetime_s=10, grace_s=0, clock=clock)
    assert pruner.run_once() == [40 * N, 50 * N, 60 * N]
    assert client.truncated == [[40 * N, 50 * N, 60 * N]]
    assert p1.asked == [(220_000, 210_000 * N - 1)]
    assert p1.completed == p2.completed == [(220_000, 60 * N)]

    p1.bound, p2.bound = 80 * N, 77 * N
    client.tx = client.tx.__class__(
        transaction_id=1, read_pointer=1, invalids=(75 * N, 80 * N), write_pointer=1
    )
    assert pruner.run_once() == [75 * N]
    assert p2.completed[-1] == (220_000, 75 * N)


def test_no_pruning_below_every_invalid_or_when_a_plugin_has_nothing() -> None:
    client = FixedInvalidsClient((40 * N, 50 * N))
    for bound in (35 * N, -1):
        plugin = RecordingPlugin(bound)
        pruner = TransactionPruner(
            client, [plugin], max_lifetime_s=10, grace_s=0, clock=FakeClock()
        )
        assert pruner.run_once() == []
        assert not plugin.completed
    assert not client.truncated


def test_a_failing_plugin_stops_the_run() -> None:
    class Broken(RecordingPlugin):
        def fetch_prune_upper_bound(self, now_ms: int, inactive_tx_bound: int) -> int:
            raise RuntimeError("store unavailable")

    client = FixedInvalidsClient((40 * N,))
    good = RecordingPlugin(100 * N)
    pruner = TransactionPruner(client, [good, Broken(100 * N)], max_lifetime_s=10, grace_s=0)
    assert pruner.run_once() == []
    assert not client.truncated and not good.completed


def test_pruning_a_real_manager() -> None:
    with in_process_system() as s:
        txs = [s.manager.start_short() for _ in range(3)]
        for tx in txs:
            s.manager.invalidate(tx.transaction_id)
        s.clock.advance(2_000)
        plugin = RecordingPlugin(txs[1].transaction_id)
        pruner = TransactionPruner(s.client, [plugin], max_lifetime_s=1, grace_s=0, clock=s.clock)
        assert pruner.run_once() == [txs[0].transaction_id, txs[1].transaction_id]
        assert s.manager.get_snapshot().invalid == (txs[2].transaction_id,)


def test_no_participant_means_nothing_is_truncated() -> None:
    with in_process_system() as s:
        s.manager.invalidate(s.manager.start_short().transaction_id)
        s.clock.advance(10**9)
        pruner = TransactionPruner(s.client, [], max_lifetime_s=1, grace_s=0, clock=s.clock)
        assert pruner.run_once() == []
        assert s.manager.invalid_size() == 1


def test_truncation_never_goes_above_the_minimum_nor_the_inactive_bound() -> None:
    clock = FakeClock(220_000)
    s = 1000 * N  # ids one second apart
    client = FixedInvalidsClient((40 * s, 150 * s, 205 * s, 215 * s))
    # Plugins claiming more than the inactive bound (210 s, less one) are held to it
    p1, p2 = RecordingPlugin(2**62), RecordingPlugin(2**61)
    pruner = TransactionPruner(client, [p1, p2], max_lifetime_s=10, grace_s=0, clock=clock)
    assert pruner.run_once() == [40 * s, 150 * s, 205 * s]
    # and the smallest bound wins
    p2.bound = 150 * s
    assert pruner.run_once() == [40 * s, 150 * s]


def test_a_named_participant_that_has_not_reported_blocks_truncation() -> None:
    clock = FakeClock(220_000)
    client = FixedInvalidsClient((40 * N, 50 * N))
    reported = ReportedBounds(["tms", "orders"])
    in_process = RecordingPlugin(100 * N)
    pruner = TransactionPruner(
        client, [in_process], max_lifetime_s=10, grace_s=0, reported=reported, clock=clock
    )
    # Given one of two named participants has reported
    pruner.report("tms", 100 * N)
    # Then nothing is pruned
    assert pruner.run_once() == [] and not client.truncated
    # When the other reports a bound below one of the ids
    pruner.report("orders", 45 * N)
    # Then only what both (and the in-process plugin) have cleaned goes
    assert pruner.run_once() == [40 * N]
    assert in_process.completed == [(220_000, 40 * N)]


def test_reports_from_participants_not_configured_are_refused() -> None:
    reported = ReportedBounds(["tms"])
    with pytest.raises(InvalidArgumentError, match="prune_participants"):
        reported.report("intruder", 10**18)
    assert reported.bound("tms") is None


def test_reports_over_thrift_and_the_schedule() -> None:
    config = dataclasses.replace(
        SYSTEM_CONFIG, max_lifetime_s=1, prune_grace_s=0, prune_participants=("tms",)
    )
    with in_process_system(config) as s:
        pruner = manager_pruner(s.manager)
        s.manager.invalidate(s.manager.start_short().transaction_id)
        s.clock.advance(2_000)
        server = ServerThread(
            new_server(s.manager, ServerConfig(port=0), TephraHandler(s.manager, pruner))
        )
        address = server.start()
        service = PruningService(pruner, 0.05)
        service.start()
        try:
            # Given pruning runs every 50 ms: nothing goes while the participant is silent
            time.sleep(0.3)
            assert s.manager.invalid_size() == 1
            with ThriftTxClient(address, retry=RetryNTimes(1)) as client:
                # Names the server was not configured with are refused
                with pytest.raises(InvalidArgumentError, match="not a pruning participant"):
                    client.report_prune_upper_bound("intruder", 2**62)
                # When the configured participant reports
                client.report_prune_upper_bound("tms", 2**62)
            # Then the next scheduled run truncates
            deadline = time.monotonic() + 10
            while s.manager.invalid_size() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert s.manager.invalid_size() == 0
        finally:
            service.stop()
            server.stop()


def test_reporting_to_a_server_that_does_not_prune_is_refused() -> None:
    with thrift_system() as s:
        assert isinstance(s.client, ThriftTxClient)
        with pytest.raises(InvalidArgumentError, match="not enabled"):
            s.client.report_prune_upper_bound("tms", 1)
