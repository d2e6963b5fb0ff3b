"""``extendTimeout``: txms's extension of Tephra's protocol, a lease on a short
transaction (the Spark data source holds one for each job). In process and over Thrift,
with a fake clock; the extension survives a restart."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from tests.txn.harness import SYSTEM_CONFIG, TxSystem, in_process_system, restarted, thrift_system
from txn.errors import InvalidArgumentError, TransactionNotInProgressError

CONFIG = dataclasses.replace(SYSTEM_CONFIG, max_lifetime_s=100)


@pytest.fixture(params=[in_process_system, thrift_system], ids=["in-process", "thrift"])
def system(request: pytest.FixtureRequest) -> Iterator[TxSystem]:
    make: Callable[..., object] = request.param
    with make(CONFIG) as s:  # type: ignore[attr-defined]
        yield s


def test_a_renewed_transaction_outlives_its_first_timeout(system: TxSystem) -> None:
    client, manager, clock = system.client, system.manager, system.clock
    tx = client.start_short(10)
    checkpoint = client.checkpoint(tx)
    # Given a lease renewed every 8 s, 40 s pass: four times the timeout
    for _ in range(5):
        clock.advance(8_000)
        assert manager.expire_timed_out() == []
        expiration = client.extend_timeout(tx.transaction_id, 10)
        assert expiration == clock.now_ms() + 10_000
    # Then it is still in progress and commits, checkpoints and all
    client.commit_or_throw(checkpoint)
    assert client.start_short().is_visible(checkpoint.write_pointer)


def test_without_renewal_it_times_out(system: TxSystem) -> None:
    client, manager, clock = system.client, system.manager, system.clock
    tx = client.start_short(10)
    clock.advance(8_000)
    client.extend_timeout(tx.transaction_id, 10)
    clock.advance(10_001)  # the holder is gone: no renewal
    assert manager.expire_timed_out() == [tx.transaction_id]
    with pytest.raises(TransactionNotInProgressError, match="invalidated"):
        client.extend_timeout(tx.transaction_id, 10)


def test_never_shorter_never_past_the_lifetime(system: TxSystem) -> None:
    client, clock = system.client, system.clock
    tx = client.start_short(60)
    start = clock.now_ms()
    assert client.extend_timeout(tx.transaction_id, 5) == start + 60_000  # not shortened
    clock.advance(50_000)
    # max_lifetime_s = 100: the lease cannot run past start + 100 s
    assert client.extend_timeout(tx.transaction_id, 90) == tx.transaction_id // 10**6 + 100_000


def test_refusals(system: TxSystem) -> None:
    client = system.client
    long_tx = client.start_long()
    with pytest.raises(InvalidArgumentError, match="long transaction"):
        client.extend_timeout(long_tx.transaction_id, 10)
    short = client.start_short()
    checkpoint = client.checkpoint(short)
    with pytest.raises(InvalidArgumentError, match="checkpoint"):
        client.extend_timeout(checkpoint.write_pointer, 10)
    for bad in (0, -1):
        with pytest.raises(InvalidArgumentError, match="timeout"):
            client.extend_timeout(short.transaction_id, bad)
    client.commit_or_throw(short)
    with pytest.raises(TransactionNotInProgressError):
        client.extend_timeout(short.transaction_id, 10)
    with pytest.raises(TransactionNotInProgressError):
        client.extend_timeout(12345, 10)


def test_the_extension_survives_a_restart() -> None:
    with in_process_system(CONFIG) as system:
        client, clock = system.client, system.clock
        logged, snapshotted = client.start_short(10), client.start_short(10)
        clock.advance(5_000)
        client.extend_timeout(snapshotted.transaction_id, 60)
        system.manager.take_snapshot()
        client.extend_timeout(logged.transaction_id, 60)  # only in the log
        clock.advance(30_000)
        # When the manager restarts from snapshot + log (no clean stop)
        again = restarted(system, CONFIG)
        try:
            # Then both keep their extended timeouts
            assert again.expire_timed_out() == []
            clock.advance(40_000)
            assert sorted(again.expire_timed_out()) == sorted(
                [logged.transaction_id, snapshotted.transaction_id]
            )
        finally:
            again.stop()
