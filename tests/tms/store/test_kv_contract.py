"""The key-value contract (``tms.store.kv``) on every engine (``tests.tms.store.engines``):
order and ranges, atomic multi-table batches, scans that see one state, epochs, fences,
and a closed store refusing every call. Failures of the medium are engine-specific to inject:
LevelDB's are in ``test_leveldb_faults``."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from tms.errors import FencedError, StorageUnavailableError
from tms.store.kv import KeyValueStore


def test_kv_scan_order_ranges_and_reverse(kv: KeyValueStore) -> None:
    table = kv.table(b"x")
    table.write([(b"b", b"2"), (b"a", b"1"), (b"c\xff", b"3"), (b"c", b"4")])
    assert [k for k, _ in table.scan()] == [b"a", b"b", b"c", b"c\xff"]
    assert [k for k, _ in table.scan(b"b", b"c\xff")] == [b"b", b"c"]
    assert [k for k, _ in table.scan(reverse=True)] == [b"c\xff", b"c", b"b", b"a"]
    assert table.get(b"a") == b"1" and table.get(b"zz") is None
    table.write(deletes=[b"a", b"nope"])
    assert [k for k, _ in table.scan()] == [b"b", b"c", b"c\xff"]


def test_kv_tables_are_separate(kv: KeyValueStore) -> None:
    kv.table(b"x").write([(b"k", b"x")])
    kv.table(b"y").write([(b"k", b"y")])
    assert list(kv.table(b"x").scan()) == [(b"k", b"x")]
    assert kv.table(b"y").get(b"k") == b"y"


def test_kv_batch_spans_tables_and_applies_in_order(kv: KeyValueStore) -> None:
    kv.table(b"y").write([(b"gone", b"0")])
    kv.write(
        [
            (b"x", b"a", b"1"),
            (b"y", b"b", b"2"),
            (b"z", b"c", b"3"),
            (b"y", b"gone", None),
            (b"x", b"a", b"1-again"),  # a later change of a key wins
            (b"z", b"d", b"4"),
            (b"z", b"d", None),
        ]
    )
    assert list(kv.table(b"x").scan()) == [(b"a", b"1-again")]
    assert list(kv.table(b"y").scan()) == [(b"b", b"2")]
    assert list(kv.table(b"z").scan()) == [(b"c", b"3")]


def test_kv_scan_sees_one_state(kv: KeyValueStore) -> None:
    table = kv.table(b"x")
    table.write([(b"a", b"1"), (b"b", b"2")])
    scan = table.scan()
    assert next(scan) == (b"a", b"1")
    table.write([(b"aa", b"new"), (b"c", b"3")], deletes=[b"b"])
    assert list(scan) == [(b"b", b"2")]


def test_kv_chunks_are_the_rows_of_scan(kv: KeyValueStore) -> None:
    table = kv.table(b"x")
    table.write([(b"%05d" % i, b"v%d" % i) for i in range(1000)])
    for start, stop, reverse in (
        (b"", None, False),
        (b"00100", b"00900", False),
        (b"", None, True),
    ):
        chunks = list(table.scan_chunks(start, stop, reverse=reverse))
        assert all(chunks), "chunks are never empty"
        rows = [row for chunk in chunks for row in chunk]
        assert rows == list(table.scan(start, stop, reverse=reverse))
    assert list(table.scan_chunks(b"zzz")) == []
    # one state too: rows written after the first chunk was read do not show
    chunks = table.scan_chunks()
    first = next(chunks)
    table.write([(b"99999", b"late")], deletes=[b"00999"])
    rows = first + [row for chunk in chunks for row in chunk]
    assert len(rows) == 1000 and rows[-1] == (b"00999", b"v999")


def test_kv_epoch_stays_while_nothing_fails(kv: KeyValueStore) -> None:
    before = kv.epoch
    kv.write([(b"x", b"a", b"1")])
    kv.table(b"x").write([(b"b", b"2")])
    assert kv.epoch == before == kv.table(b"x").epoch


def test_kv_write_from_another_epoch_changes_nothing(kv: KeyValueStore) -> None:
    table = kv.table(b"x")
    table.write([(b"a", b"1")], epoch=kv.epoch)
    kv.write([(b"x", b"b", b"2")], epoch=kv.epoch)
    with pytest.raises(StorageUnavailableError):
        table.write([(b"a", b"stale")], epoch=kv.epoch + 1)
    with pytest.raises(StorageUnavailableError):
        kv.write([(b"x", b"c", b"stale")], epoch=kv.epoch + 1)
    assert list(table.scan()) == [(b"a", b"1"), (b"b", b"2")]
    assert table.epoch == kv.epoch


def test_kv_closed_store_is_unavailable(kv: KeyValueStore) -> None:
    table = kv.table(b"x")
    table.write([(b"a", b"1")])
    kv.close()
    with pytest.raises(StorageUnavailableError):
        table.write([(b"a", b"1")])
    with pytest.raises(StorageUnavailableError):
        kv.write([(b"x", b"b", b"2")])
    with pytest.raises(StorageUnavailableError):
        table.get(b"a")
    with pytest.raises(StorageUnavailableError):
        list(table.scan())
    with pytest.raises(StorageUnavailableError):
        list(table.scan_chunks())


def test_kv_fence_epochs_grow_per_name(kv: KeyValueStore) -> None:
    assert [kv.acquire_fence(b"a"), kv.acquire_fence(b"a"), kv.acquire_fence(b"b")] == [1, 2, 1]
    assert kv.acquire_fence(b"a") == 3


def test_kv_fenced_write_applies_only_under_the_newest_epoch(kv: KeyValueStore) -> None:
    # Given an owner's fence, under which writes go in
    first = kv.acquire_fence(b"topic")
    kv.write([(b"x", b"a", b"1")], fence=(b"topic", first))
    # When another takes the fence
    second = kv.acquire_fence(b"topic")
    # Then the first owner's writes are refused whole, and change nothing
    before = kv.epoch
    with pytest.raises(FencedError):
        kv.write([(b"x", b"b", b"2"), (b"y", b"c", b"3")], fence=(b"topic", first))
    with pytest.raises(FencedError):
        kv.write([(b"x", b"b", b"2")], fence=(b"never-taken", 1))
    assert list(kv.table(b"x").scan()) == [(b"a", b"1")] and list(kv.table(b"y").scan()) == []
    # and the store did not go down for it: the new owner and unfenced writes go on
    assert kv.epoch == before
    kv.write([(b"x", b"b", b"new")], fence=(b"topic", second))
    kv.write([(b"x", b"c", b"free")])
    kv.write([(b"x", b"d", b"other")], fence=(b"topic", second), epoch=kv.epoch)
    assert [k for k, _ in kv.table(b"x").scan()] == [b"a", b"b", b"c", b"d"]


def test_kv_no_old_fence_write_lands_after_a_new_fence_is_taken(kv: KeyValueStore) -> None:
    # Given writers appending under one fence epoch as fast as they can, until refused
    epoch = kv.acquire_fence(b"t")
    counter = itertools.count()
    written: list[int] = []
    refused: list[int] = []

    def append() -> None:
        while True:
            n = next(counter)
            try:
                kv.write([(b"x", b"%08d" % n, b"v")], fence=(b"t", epoch))
            except FencedError:
                refused.append(n)
                return
            written.append(n)

    writers = [threading.Thread(target=append, daemon=True) for _ in range(4)]
    for w in writers:
        w.start()
    while len(written) < 100:
        time.sleep(0.001)
    # When a new epoch is taken mid-stream
    kv.acquire_fence(b"t")
    seen = list(kv.table(b"x").scan())
    for w in writers:
        w.join(30)
    # Then every writer was refused from then on, and nothing was added after it
    assert len(refused) == 4
    assert list(kv.table(b"x").scan()) == seen
    assert {int(k) for k, _ in seen} == set(written)


def test_kv_updates_change_present_rows_and_never_add_one(kv: KeyValueStore) -> None:
    # Given a row that is there and one deleted after it was read
    kv.write([(b"x", b"here", b"old"), (b"x", b"gone", b"old"), (b"x", b"dropped", b"old")])
    kv.write([(b"x", b"gone", None)])
    # When they are updated, after ops of the same write that add one row and delete one
    kv.write(
        [(b"x", b"added", b"put"), (b"x", b"dropped", None), (b"x", b"other", None)],
        updates=[
            (b"x", b"here", b"new"),
            (b"x", b"gone", b"new"),
            (b"x", b"added", b"new"),
            (b"x", b"dropped", b"new"),
        ],
    )
    # Then the present rows (one just added) changed, and the deleted ones did not come back
    assert list(kv.table(b"x").scan()) == [(b"added", b"new"), (b"here", b"new")]


def test_kv_updates_merged_with_other_writes_keep_their_order(kv: KeyValueStore) -> None:
    # Given concurrent writers: plain puts, deletes and updates of the same keys (an
    # engine may merge them into one physical write)
    kv.write([(b"x", b"%03d" % i, b"v0") for i in range(50)])

    def rewrite(n: int) -> None:
        for i in range(50):
            key = b"%03d" % i
            if n == 0:
                kv.write([(b"x", key, None)])  # a purge
            else:
                kv.write([], updates=[(b"x", key, b"v%d" % n)])  # a negation

    threads = [threading.Thread(target=rewrite, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # Then every key was purged and no update brought one back
    assert list(kv.table(b"x").scan()) == []


def test_kv_put_replaces_an_existing_row_in_a_batch_of_new_ones(kv: KeyValueStore) -> None:
    kv.write([(b"x", b"b", b"old")])
    kv.write([(b"x", b"a", b"1"), (b"x", b"b", b"new"), (b"x", b"c", b"3")])
    assert list(kv.table(b"x").scan()) == [(b"a", b"1"), (b"b", b"new"), (b"c", b"3")]


def test_kv_new_keys_is_a_hint_and_an_existing_key_is_still_replaced(kv: KeyValueStore) -> None:
    kv.write([(b"x", b"b", b"old")])
    kv.write([(b"x", b"a", b"1"), (b"x", b"b", b"new")], new_keys=True)
    fence = kv.acquire_fence(b"f")
    kv.write([(b"x", b"b", b"newer"), (b"x", b"c", b"3")], new_keys=True, fence=(b"f", fence))
    assert list(kv.table(b"x").scan()) == [(b"a", b"1"), (b"b", b"newer"), (b"c", b"3")]
