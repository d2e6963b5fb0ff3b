"""The write-ahead log's split flush (``start_flush`` / ``finish_flush``): nothing counts
as durable before its file is synced, split flushes pipeline and become durable in write
order only, others wait for them as for any flush, a failed sync fails the log, and a
roll inside the batch syncs the file it leaves."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from txn.errors import TxStorageError
from txn.persist.edit import TransactionEdit
from txn.persist.memory import MemoryStorage
from txn.persist.store import TransactionStateStore
from txn.persist.wal import WriteAheadLog
from txn.transaction import TransactionType


def edit(wp: int) -> TransactionEdit:
    return TransactionEdit.started(wp, wp - 1, 10**13, TransactionType.SHORT)


@pytest.fixture
def storage() -> MemoryStorage:
    backend = MemoryStorage()
    backend.open()
    return backend


@pytest.fixture
def wal(storage: MemoryStorage) -> Iterator[WriteAheadLog]:
    log = WriteAheadLog(TransactionStateStore(storage))
    log.open(1000)
    yield log
    if log.failure is None:
        log.close()


def replayed(storage: MemoryStorage) -> list[int]:
    store = TransactionStateStore(storage)
    return [e.write_pointer for e in store.edits_since(0)]


def test_nothing_is_durable_before_finish(wal: WriteAheadLog, storage: MemoryStorage) -> None:
    assert wal.start_flush() is None  # nothing queued
    tickets = [wal.append(edit(wp)) for wp in (11, 12, 13)]
    write = wal.start_flush()
    assert write is not None and write.ticket == tickets[-1] and write.edits == 3
    assert wal.synced == 0 and storage.syncs == 0
    assert replayed(storage) == [11, 12, 13]  # written, not yet synced
    assert wal.start_flush() is None  # nothing more queued
    assert wal.flush() is None  # a split flush is running
    write.writer.sync()
    wal.finish_flush(write, None)
    assert wal.synced == tickets[-1]
    assert (wal.stats.edits, wal.stats.syncs) == (3, 1)


def test_split_flushes_pipeline_and_become_durable_in_write_order(
    wal: WriteAheadLog, storage: MemoryStorage
) -> None:
    first_ticket = wal.append(edit(11))
    first = wal.start_flush()
    second_ticket = wal.append(edit(12))
    second = wal.start_flush()  # while the first is in flight
    assert first is not None and second is not None
    assert (first.ticket, second.ticket, wal.in_flight) == (first_ticket, second_ticket, 2)
    assert replayed(storage) == [11, 12]
    wal.append(edit(13))
    assert wal.flush() is None  # threads wait while split flushes run
    wal.finish_flush(second, None)  # the later one first: says nothing about the earlier
    assert wal.synced == 0 and wal.in_flight == 2
    wal.finish_flush(first, None)
    assert wal.synced == second_ticket and wal.in_flight == 0
    assert wal.flush() == second_ticket + 1  # and an ordinary flush may lead again


def test_an_earlier_split_flush_failing_fails_the_log_after_a_later_success(
    wal: WriteAheadLog,
) -> None:
    wal.append(edit(11))
    first = wal.start_flush()
    wal.append(edit(12))
    second = wal.start_flush()
    assert first is not None and second is not None
    wal.finish_flush(second, None)
    wal.finish_flush(first, OSError(5, "injected EIO"))
    assert wal.synced == 0
    assert isinstance(wal.failure, TxStorageError)
    with pytest.raises(TxStorageError):
        wal.wait(second.ticket)


def test_waiters_wait_for_the_split_flush(wal: WriteAheadLog) -> None:
    ticket = wal.append(edit(21))
    write = wal.start_flush()
    assert write is not None
    done = threading.Event()

    def waiter() -> None:
        wal.wait(ticket)
        done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    assert not done.wait(0.2)  # the flush is running: the waiter must not lead another
    later = wal.append(edit(22))
    wal.finish_flush(write, None)
    thread.join(5)
    assert done.is_set()
    wal.wait(later)  # queued during the split flush: an ordinary flush takes it
    assert wal.synced == later


def test_a_failed_sync_fails_the_log(wal: WriteAheadLog) -> None:
    ticket = wal.append(edit(31))
    write = wal.start_flush()
    assert write is not None
    heard: list[BaseException | None] = []
    wal.add_listener(lambda _ticket, failure: heard.append(failure))
    wal.finish_flush(write, OSError(5, "Input/output error"))
    assert wal.synced < ticket
    assert isinstance(wal.failure, TxStorageError)
    assert heard and isinstance(heard[0], TxStorageError)
    with pytest.raises(TxStorageError):
        wal.append(edit(32))
    with pytest.raises(TxStorageError):
        wal.wait(ticket)
    with pytest.raises(TxStorageError):
        wal.start_flush()


def test_a_roll_in_the_batch_syncs_the_file_it_leaves(
    wal: WriteAheadLog, storage: MemoryStorage
) -> None:
    wal.append(edit(41))
    wal.roll(2000)
    last = wal.append(edit(42))
    write = wal.start_flush()
    assert write is not None and write.ticket == last
    assert storage.syncs == 1  # the old file, before it was closed
    assert storage.list_logs() == [1000, 2000]
    write.writer.sync()
    wal.finish_flush(write, None)
    assert replayed(storage) == [41, 42]
