"""The closed-loop driver: callers over processes and threads, failures surfaced."""

from __future__ import annotations

import os
import threading

import pytest

from benchmarks.peers.base import Call
from benchmarks.peers.driver import drive, spawn, spread
from tests.benchmarks.fakes import FORK_WARNING

pytestmark = pytest.mark.filterwarnings(FORK_WARNING)


def test_spread_is_even_over_at_most_four_processes() -> None:
    assert spread(1) == [1]
    assert spread(8) == [2, 2, 2, 2]
    assert spread(32) == [8, 8, 8, 8]
    assert spread(6) == [2, 2, 1, 1]
    assert spread(3) == [1, 1, 1]
    with pytest.raises(ValueError):
        spread(0)


def counting(batch: int) -> Call:
    return lambda: batch


def test_drive_in_process_counts_every_callers_items() -> None:
    made: list[tuple[int, str]] = []

    def make(i: int) -> Call:
        made.append((i, threading.current_thread().name))
        return counting(10)

    rate = drive(make, 3, 0.05, forks=False)
    assert sorted(i for i, _ in made) == [0, 1, 2]
    assert rate.items > 0 and rate.items % 10 == 0
    assert rate.per_second == rate.items / rate.seconds


def test_drive_over_processes_builds_each_caller_in_its_worker() -> None:
    parent = os.getpid()

    def make(i: int) -> Call:
        assert os.getpid() != parent
        return counting(1)

    rate = drive(make, 5, 0.05, forks=True)
    assert rate.items > 0
    assert rate.seconds >= 0.05


def test_a_failing_worker_is_an_error_with_its_traceback() -> None:
    def make(i: int) -> Call:
        if i == 2:
            raise KeyError("no such topic")
        return counting(1)

    with pytest.raises(RuntimeError, match="no such topic"):
        drive(make, 4, 0.05, forks=True)


def test_a_failing_call_is_an_error_too() -> None:
    def broken() -> int:
        raise ConnectionError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        drive(lambda i: broken, 1, 0.05, forks=True)


@pytest.mark.parametrize("forks", [True, False])
def test_spawned_failures_reach_the_joiner(forks: bool) -> None:
    def fail() -> None:
        raise ValueError("paced sender broke")

    worker = spawn(fail, forks=forks)
    with pytest.raises(RuntimeError, match="paced sender broke"):
        worker.join(30)


@pytest.mark.parametrize("forks", [True, False])
def test_spawned_success_joins_quietly(forks: bool) -> None:
    spawn(lambda: None, forks=forks).join(30)
