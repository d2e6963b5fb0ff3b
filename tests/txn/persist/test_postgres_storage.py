"""What the PostgreSQL storage adds to the contract suite: epochs and fencing, one
chunk per sync, and its errors."""

from __future__ import annotations

import psycopg
import pytest

from txms_testing import free_port
from txn.errors import FencedError, TxStorageError
from txn.persist.postgres import PostgresStorage


def chunks(url: str) -> list[tuple[int, int, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT ts, seq, epoch FROM txn_log_chunk ORDER BY ts, seq")
        return [(int(a), int(b), int(c)) for a, b, c in rows]


def test_each_open_takes_a_newer_epoch(pg_url: str) -> None:
    first, second = PostgresStorage(pg_url, holder="a"), PostgresStorage(pg_url, holder="b")
    first.open()
    second.open()
    assert (first.epoch, second.epoch) == (1, 2)
    first.close()
    second.close()


def test_a_deposed_writer_can_change_nothing(pg_url: str) -> None:
    # Given a leader with an open log that has stored one chunk
    old = PostgresStorage(pg_url, holder="old")
    old.open()
    log = old.create_log(10)
    log.write(b"first")
    log.sync()
    old.write_snapshot(5, b"snap")
    # When another server opens the storage (a new epoch)
    new = PostgresStorage(pg_url, holder="new")
    new.open()
    # Then every change the old one tries is refused, and nothing is stored
    log.write(b"second")
    with pytest.raises(FencedError) as raised:
        log.sync()
    assert raised.value.epoch == old.epoch
    with pytest.raises(FencedError):
        old.create_log(11)
    with pytest.raises(FencedError):
        old.write_snapshot(6, b"snap")
    with pytest.raises(FencedError):
        old.delete_snapshot(5)
    with pytest.raises(FencedError):
        old.delete_log(10)
    with pytest.raises(FencedError):
        old.truncate_log(10, 0)
    assert chunks(pg_url) == [(10, 0, old.epoch)]
    assert new.list_logs() == [10] and new.list_snapshots() == [5]
    with new.read_log(10) as data:
        assert data == b"first"
    # while the new one writes
    new.create_log(11).write(b"x")
    old.close()
    new.close()


def test_one_chunk_per_sync_and_an_empty_sync_stores_nothing(pg_url: str) -> None:
    storage = PostgresStorage(pg_url)
    storage.open()
    log = storage.create_log(1)
    for part in (b"a", b"b", b"c"):
        log.write(part)
    log.sync()
    log.sync()
    log.write(b"d")
    log.sync()
    assert chunks(pg_url) == [(1, 0, 1), (1, 1, 1)]
    with storage.read_log(1) as data:
        assert data == b"abcd"
    storage.truncate_log(1, 2)
    with storage.read_log(1) as data:
        assert data == b"ab"
    assert log.fileno() is None
    storage.close()


def test_an_unreachable_database_is_a_storage_error() -> None:
    storage = PostgresStorage(f"postgresql://postgres@127.0.0.1:{free_port()}/none")
    with pytest.raises(TxStorageError, match=r"postgresql://127\.0\.0\.1"):
        storage.open()


def test_the_location_never_shows_a_password() -> None:
    storage = PostgresStorage("postgresql://u:secret@db.example:5432/txn")
    assert "secret" not in storage.location
    assert storage.location == "postgresql://db.example:5432/txn"
