"""Sync listeners on both engines' logs: a listener of every flush hears each one, a
listener of failures only hears nothing until a flush fails, then hears the failure; and a
manager whose log fails goes FAILED (it listens to failures only)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.txn.faulty_storage import FaultyStorage
from txn import native
from txn.durability import DurableLog, NullLog
from txn.engine import resolve
from txn.errors import TxStorageError
from txn.manager import ManagerState, TransactionManager
from txn.persist.edit import TransactionEdit
from txn.persist.store import TransactionStateStore
from txn.transaction import TransactionType

ENGINES = [
    "python",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not native.AVAILABLE, reason="the native engine is not built"),
    ),
]


def edit(wp: int) -> TransactionEdit:
    return TransactionEdit.started(wp, wp - 1, 10**13, TransactionType.SHORT)


Heard = list[tuple[int, BaseException | None]]


def listener(heard: Heard) -> Callable[[int, BaseException | None], None]:
    return lambda ticket, failure: heard.append((ticket, failure))


def open_log(engine: str) -> tuple[FaultyStorage, DurableLog]:
    storage = FaultyStorage()
    storage.open()
    log = resolve(engine).new_log(TransactionStateStore(storage), 1.0)
    log.open(1000)
    return storage, log


@pytest.mark.parametrize("engine", ENGINES)
def test_failure_listeners_hear_only_a_failed_flush(engine: str) -> None:
    storage, log = open_log(engine)
    every: Heard = []
    failures: Heard = []
    log.add_listener(listener(every))
    log.add_listener(listener(failures), failures_only=True)
    # When two flushes succeed
    log.wait(log.append(edit(1)))
    log.wait(log.append(edit(2)))
    # Then the listener of every flush heard both, the failure listener nothing
    assert every == [(1, None), (2, None)]
    assert failures == []
    # When a flush fails
    storage.failing = True
    ticket = log.append(edit(3))
    with pytest.raises(TxStorageError):
        log.wait(ticket)
    # Then both heard the failure
    assert len(every) == 3 and isinstance(every[2][1], TxStorageError)
    assert len(failures) == 1 and isinstance(failures[0][1], TxStorageError)
    assert failures[0][0] < ticket  # never reported durable


@pytest.mark.parametrize("engine", ENGINES)
def test_a_removed_listener_of_either_kind_hears_nothing(engine: str) -> None:
    storage, log = open_log(engine)
    every: Heard = []
    failures: Heard = []
    on_every, on_failure = listener(every), listener(failures)
    log.add_listener(on_every)
    log.add_listener(on_failure, failures_only=True)
    log.remove_listener(on_failure)
    log.remove_listener(on_every)
    with pytest.raises(ValueError):
        log.remove_listener(on_every)
    storage.failing = True
    ticket = log.append(edit(1))
    with pytest.raises(TxStorageError):
        log.wait(ticket)
    assert every == [] and failures == []


def test_a_log_kept_nowhere_takes_both_kinds_of_listener() -> None:
    log = NullLog()
    heard: Heard = []
    on_every = listener(heard)
    log.add_listener(on_every)
    log.add_listener(on_every, failures_only=True)
    log.remove_listener(on_every)
    log.remove_listener(on_every)
    with pytest.raises(ValueError):
        log.remove_listener(on_every)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_manager_whose_log_fails_goes_failed(engine: str) -> None:
    storage = FaultyStorage()
    manager = TransactionManager(store=TransactionStateStore(storage), engine=resolve(engine))
    manager.start()
    try:
        manager.start_short()  # a flush that succeeds changes nothing
        assert manager.state is ManagerState.RUNNING
        storage.failing = True
        with pytest.raises(TxStorageError):
            manager.start_short()
        assert manager.state is ManagerState.FAILED
    finally:
        manager.stop()
