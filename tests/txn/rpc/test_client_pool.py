"""The Thrift client's connection pool and retry strategies (Tephra's PooledClientProvider
and RetryWithBackoff/RetryNTimes scenarios)."""

from __future__ import annotations

import threading
import time

import pytest

from txms_common.retry import RetryNTimes, RetryWithBackoff
from txn.errors import InvalidArgumentError, TxServiceUnavailableError
from txn.rpc.client import _Pool, parse_address


class Conn:
    closed = False
    gone = False  # the server closed it while it was idle in the pool

    def close(self) -> None:
        self.closed = True

    def stale(self) -> bool:
        return self.gone


def test_pool_creates_up_to_its_size_and_reuses() -> None:
    made: list[Conn] = []

    def factory() -> Conn:
        made.append(Conn())
        return made[-1]

    pool = _Pool(factory, size=3, obtain_timeout_s=0.1)
    conns = [pool.obtain() for _ in range(3)]
    assert len({id(c) for c in conns}) == 3
    # Given all three in use, a fourth caller times out
    with pytest.raises(TxServiceUnavailableError, match="no connection free"):
        pool.obtain()
    pool.release(conns[0])
    assert pool.obtain() is conns[0]
    assert len(made) == 3


def test_exactly_one_of_four_waiters_times_out_without_releases() -> None:
    pool = _Pool(Conn, size=3, obtain_timeout_s=0.1)
    failures: list[BaseException] = []

    def take() -> None:
        try:
            pool.obtain()
        except TxServiceUnavailableError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(failures) == 1


def test_discarded_connections_are_recreated() -> None:
    pool = _Pool(Conn, size=1, obtain_timeout_s=0.1)
    first = pool.obtain()
    pool.discard(first)
    assert first.closed
    second = pool.obtain()
    assert second is not first


def test_a_waiter_gets_a_released_or_a_new_connection_before_its_timeout() -> None:
    pool = _Pool(Conn, size=1, obtain_timeout_s=10)
    held = pool.obtain()
    got: list[Conn] = []

    def take() -> None:
        got.append(pool.obtain())

    for hand_back in (pool.release, pool.discard):  # the same one, then room for a new one
        waiter = threading.Thread(target=take)
        waiter.start()
        time.sleep(0.1)  # let it wait
        hand_back(held)
        waiter.join(2)
        assert not waiter.is_alive(), "the waiter was not woken"
        assert (got[-1] is held) is (hand_back == pool.release)
        held = got[-1]


def test_retry_strategies() -> None:
    assert list(RetryWithBackoff().delays()) == pytest.approx([0.1, 0.4, 1.6, 6.4, 25.6])
    assert list(RetryNTimes(2).delays()) == [0.0]
    assert list(RetryNTimes(1).delays()) == []
    with pytest.raises(ValueError):
        RetryNTimes(0)


def test_addresses() -> None:
    assert parse_address("example:99") == ("example", 99)
    assert parse_address("example") == ("example", 15165)
    assert parse_address(("h", 1)) == ("h", 1)
    with pytest.raises(InvalidArgumentError):
        parse_address("h:port")


def test_a_connection_closed_while_idle_is_replaced_not_handed_out() -> None:
    pool = _Pool(Conn, size=2, obtain_timeout_s=0.1)
    first = pool.obtain()
    pool.release(first)
    first.gone = True
    second = pool.obtain()
    assert second is not first and first.closed
    third = pool.obtain()  # the stale one no longer counts against the size
    assert third is not second
