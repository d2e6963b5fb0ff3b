"""One contract suite for every storage backend (local directory, memory, PostgreSQL),
plus recovery-reading rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from txn.errors import CorruptStateError, TxStorageError
from txn.persist.edit import TransactionEdit
from txn.persist.edit_codec import encode_record
from txn.persist.local import LocalDirStorage
from txn.persist.memory import MemoryStorage
from txn.persist.postgres import PostgresStorage
from txn.persist.storage import StateStorage
from txn.persist.store import TransactionStateStore
from txn.state import TransactionSnapshot


@pytest.fixture(params=["local", "memory", "postgres"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStorage]:
    backend: StateStorage
    if request.param == "local":
        backend = LocalDirStorage(tmp_path / "state")
    elif request.param == "memory":
        backend = MemoryStorage()
    else:
        backend = PostgresStorage(request.getfixturevalue("pg_url"))
    backend.open()
    yield backend
    backend.close()


def snapshot_at(ts: int, read_pointer: int = 1) -> TransactionSnapshot:
    return TransactionSnapshot(
        timestamp_ms=ts,
        read_pointer=read_pointer,
        write_pointer=read_pointer,
        invalid=(),
        in_progress={},
        committing={},
        committed={},
    )


def write_log(
    storage: StateStorage, ts: int, edits: list[TransactionEdit], tail: bytes = b""
) -> None:
    log = storage.create_log(ts)
    log.write(b"".join(encode_record(i, e) for i, e in enumerate(edits)) + tail)
    log.sync()
    log.close()


def read_log(storage: StateStorage, ts: int) -> bytes:
    with storage.read_log(ts) as buf:
        return bytes(buf)


def test_snapshots_round_trip_and_latest_wins(storage: StateStorage) -> None:
    store = TransactionStateStore(storage)
    assert store.latest_snapshot() is None
    for ts in (10, 30, 20):
        store.write_snapshot(snapshot_at(ts, read_pointer=ts))
    assert storage.list_snapshots() == [10, 20, 30]
    latest = store.latest_snapshot()
    assert latest is not None and latest.timestamp_ms == 30 and latest.read_pointer == 30


def test_unreadable_newest_snapshot_falls_back(storage: StateStorage) -> None:
    store = TransactionStateStore(storage)
    store.write_snapshot(snapshot_at(10, read_pointer=10))
    storage.write_snapshot(20, b"\x08garbage")
    latest = store.latest_snapshot()
    assert latest is not None and latest.timestamp_ms == 10


def test_logs_replay_in_timestamp_order(storage: StateStorage) -> None:
    write_log(storage, 5, [TransactionEdit.invalid(1)])
    write_log(storage, 7, [TransactionEdit.invalid(2), TransactionEdit.invalid(3)])
    write_log(storage, 6, [])
    store = TransactionStateStore(storage)
    assert [e.write_pointer for e in store.edits_since(0)] == [1, 2, 3]
    assert [e.write_pointer for e in store.edits_since(6)] == [2, 3]


def test_create_log_refuses_an_existing_one(storage: StateStorage) -> None:
    write_log(storage, 5, [])
    with pytest.raises(TxStorageError):
        storage.create_log(5)


@pytest.mark.parametrize("cut", [1, 8, 9, 30, 69])
def test_torn_last_record_is_dropped_and_the_file_repaired(storage: StateStorage, cut: int) -> None:
    whole = encode_record(1, TransactionEdit.invalid(2))
    write_log(storage, 5, [TransactionEdit.invalid(1)], tail=whole[:cut])
    good_size = len(encode_record(0, TransactionEdit.invalid(1)))
    store = TransactionStateStore(storage)
    assert [e.write_pointer for e in store.edits_since(0)] == [1]
    assert len(read_log(storage, 5)) == good_size


def test_zero_filled_tail_counts_as_torn(storage: StateStorage) -> None:
    write_log(storage, 5, [TransactionEdit.invalid(1)], tail=b"\x00" * 100)
    store = TransactionStateStore(storage)
    assert [e.write_pointer for e in store.edits_since(0)] == [1]


def test_garbage_before_valid_data_is_corruption(storage: StateStorage) -> None:
    good = encode_record(1, TransactionEdit.invalid(9))
    write_log(storage, 5, [TransactionEdit.invalid(1)], tail=b"\x00" * 8 + b"\x33" + good)
    store = TransactionStateStore(storage)
    with pytest.raises(CorruptStateError, match="corrupt at byte"):
        list(store.edits_since(0))


def test_retention_keeps_newest_snapshots_and_the_logs_they_need(storage: StateStorage) -> None:
    store = TransactionStateStore(storage)
    now = 1000
    for i in range(6):
        store.write_snapshot(snapshot_at(now + i))
        write_log(storage, now + i, [])
    assert store.delete_old_snapshots(3) == now + 3
    assert storage.list_snapshots() == [now + 3, now + 4, now + 5]
    store.delete_logs_older_than(now + 3)
    assert storage.list_logs() == [now + 3, now + 4, now + 5]
    assert TransactionStateStore(MemoryStorage()).delete_old_snapshots(3) == -1


def test_local_layout_is_tephras(tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path)
    storage.open()
    TransactionStateStore(storage).write_snapshot(snapshot_at(123))
    write_log(storage, 124, [])
    (tmp_path / "snapshot.abc").write_bytes(b"")  # not ours: ignored
    (tmp_path / "txlog.1.2").write_bytes(b"")
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert names == ["snapshot.123", "snapshot.abc", "txlog.1.2", "txlog.124"]
    assert storage.list_snapshots() == [123] and storage.list_logs() == [124]
    storage.close()


def test_local_directory_is_locked_against_a_second_process(tmp_path: Path) -> None:
    first = LocalDirStorage(tmp_path)
    first.open()
    second = LocalDirStorage(tmp_path)
    with pytest.raises(TxStorageError, match="in use"):
        second.open()
    first.close()
    second.open()
    second.close()


def test_local_unusable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(TxStorageError):
        LocalDirStorage(blocker / "sub").open()
