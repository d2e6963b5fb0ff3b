"""Tephra's TransactionPruningServiceTest, on TransactionPruner."""

from __future__ import annotations

from tests.fakes import FakeClock
from tests.txn.harness import in_process_system
from txn.prune import TransactionPruner, inactive_tx_bound

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
        plugin = RecordingPlugin(txs[1].transaction_id)
        pruner = TransactionPruner(s.client, [plugin], max_lifetime_s=1, grace_s=0, clock=s.clock)
        assert pruner.run_once() == [txs[0].transaction_id, txs[1].transaction_id]
        assert s.manager.get_snapshot().invalid == (txs[2].transaction_id,)
