"""Runs (``tms.store.postgres.runs``): appended writes stored as one row each, read back
key by key, from the middle of a run, around single rows, and changed by later writes —
checked against ``MemoryStore`` as the model, on a real PostgreSQL."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import psycopg
import pytest

from tests.tms.store.test_postgres import _eventually, _waiting_on_a_lock
from tms.errors import FencedError
from tms.fetcher import FetchRequest
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.memory import MemoryStore
from tms.store.postgres import PostgresStore
from tms.store.postgres.runs import merge_chunks


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_url)
    yield s
    s.close()


def _rows(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        return int(row[0])


def _key(i: int) -> bytes:
    return b"k%05d" % i


def test_an_appended_write_is_one_row_read_back_key_by_key(
    store: PostgresStore, pg_url: str
) -> None:
    # Given two appended writes of 100 and 50 rows, and one single row between them
    first = [(b"m", _key(i), b"v%d" % i) for i in range(0, 200, 2)]
    store.write(first, new_keys=True)
    store.write([(b"m", _key(201), b"single")])
    store.write([(b"m", _key(i), b"w%d" % i) for i in range(300, 350)], new_keys=True)
    # Then they are two rows of runs and one single row
    assert (_rows(pg_url, "tms_run"), _rows(pg_url, "tms_kv")) == (2, 1)
    table = store.table(b"m")
    everything = [(k, v) for _t, k, v in first] + [(_key(201), b"single")]
    everything += [(_key(i), b"w%d" % i) for i in range(300, 350)]
    # and every read sees each key once, in order: whole, from inside a run, backwards
    assert list(table.scan()) == everything
    assert list(table.scan(_key(51), _key(320))) == [
        (k, v) for k, v in everything if _key(51) <= k < _key(320)
    ]
    assert list(table.scan(_key(51), _key(320), reverse=True)) == [
        (k, v) for k, v in reversed(everything) if _key(51) <= k < _key(320)
    ]
    assert table.get(_key(52)) == b"v52" and table.get(_key(53)) is None
    assert table.get(_key(201)) == b"single" and table.get(_key(349)) == b"w349"


def test_deleting_every_entry_of_a_run_deletes_the_row_and_a_change_keeps_the_rest(
    store: PostgresStore, pg_url: str
) -> None:
    table = store.table(b"m")
    store.write([(b"m", _key(i), b"a") for i in range(10)], new_keys=True)
    store.write([(b"m", _key(i), b"b") for i in range(10, 20)], new_keys=True)
    # When one run's entries are all deleted (a purge), and one entry of the other is
    # updated, one deleted, and an update of a deleted key comes in the same batch
    store.write([(b"m", _key(i), None) for i in range(10)])
    store.write(
        [(b"m", _key(15), None)],
        updates=[(b"m", _key(12), b"negated"), (b"m", _key(15), b"x"), (b"m", _key(3), b"x")],
    )
    # Then the first run is gone as one row, the second became single rows
    assert _rows(pg_url, "tms_run") == 0
    expected = [(_key(i), b"b") for i in range(10, 20) if i != 15]
    expected[2] = (_key(12), b"negated")
    assert list(table.scan()) == expected


def test_an_append_over_existing_keys_is_written_as_single_rows(
    store: PostgresStore, pg_url: str
) -> None:
    table = store.table(b"m")
    store.write([(b"m", _key(5), b"old")])
    store.write([(b"m", _key(i), b"a") for i in range(20, 30)], new_keys=True)
    # When an appended write's range holds a single row, or overlaps a run
    store.write([(b"m", _key(i), b"n") for i in range(0, 10)], new_keys=True)
    store.write([(b"m", _key(i), b"o") for i in range(25, 35)], new_keys=True)
    # Then it replaced what was there and nothing is read twice
    expected = dict.fromkeys(map(_key, range(10)), b"n")
    expected.update(dict.fromkeys(map(_key, range(20, 25)), b"a"))
    expected.update(dict.fromkeys(map(_key, range(25, 35)), b"o"))
    assert list(table.scan()) == sorted(expected.items())
    assert _rows(pg_url, "tms_kv") == len(expected)  # written as single rows after all


def test_a_fenced_append_under_a_stale_fence_writes_nothing(store: PostgresStore) -> None:
    old = store.acquire_fence(b"topic")
    store.write([(b"m", b"a", b"1")], new_keys=True, fence=(b"topic", old))
    store.acquire_fence(b"topic")
    with pytest.raises(FencedError):
        store.write([(b"m", b"b", b"2"), (b"m", b"c", b"3")], new_keys=True, fence=(b"topic", old))
    assert list(store.table(b"m").scan()) == [(b"a", b"1")]


def test_random_writes_read_as_the_model_does(store: PostgresStore) -> None:
    # Appends, overwrites, deletes and updates at random, in several tables: every read
    # answers as MemoryStore's
    model = MemoryStore()
    rng = random.Random(20)
    tables = (b"m", b"p")
    for _ in range(120):
        t = rng.choice(tables)
        kind = rng.random()
        if kind < 0.5:
            start = rng.randrange(400)
            ops = [
                (t, _key(start + i), b"%d" % rng.randrange(10**6))
                for i in range(rng.randrange(1, 9))
            ]
            store.write(ops, new_keys=True)
            model.write(ops, new_keys=True)
        elif kind < 0.8:
            ops2 = [
                (
                    t,
                    _key(rng.randrange(410)),
                    None if rng.random() < 0.6 else b"p%d" % rng.randrange(99),
                )
                for _ in range(rng.randrange(1, 6))
            ]
            store.write(ops2)
            model.write(ops2)
        else:
            ups = [(t, _key(rng.randrange(410)), b"u") for _ in range(rng.randrange(1, 4))]
            store.write((), updates=ups)
            model.write((), updates=ups)
        t = rng.choice(tables)
        lo, hi = sorted(_key(rng.randrange(420)) for _ in range(2))
        for reverse in (False, True):
            assert list(store.table(t).scan(lo, hi, reverse=reverse)) == list(
                model.table(t).scan(lo, hi, reverse=reverse)
            )
        probe = _key(rng.randrange(410))
        assert store.table(t).get(probe) == model.table(t).get(probe)
    for t in tables:
        assert list(store.table(t).scan()) == list(model.table(t).scan())
        assert list(store.table(t).scan(reverse=True)) == list(model.table(t).scan(reverse=True))


def test_a_poll_starting_inside_a_published_request_reads_from_that_message(
    store: PostgresStore,
) -> None:
    svc = MessagingService(store)
    topic = TopicId("ns", "runs")
    svc.create_topic(topic)
    svc.publish(StoreRequest(topic, [b"%d" % i for i in range(100)]))
    every = svc.fetch(topic).messages
    after = svc.fetch(topic, FetchRequest(start_id=every[41].id, inclusive=False)).messages
    assert [m.payload for m in every] == [b"%d" % i for i in range(100)]
    assert [m.payload for m in after] == [b"%d" % i for i in range(42, 100)]


def test_merged_chunks_keep_key_order_both_ways() -> None:
    a = [[(b"a", b""), (b"c", b"")], [(b"f", b"")]]
    b = [[(b"b", b""), (b"d", b""), (b"e", b"")], [(b"g", b"")]]
    merged = [k for chunk in merge_chunks(iter(a), iter(b), False) for k, _v in chunk]
    assert merged == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    down = [[list(reversed(c)) for c in reversed(x)] for x in (a, b)]
    merged = [k for chunk in merge_chunks(iter(down[0]), iter(down[1]), True) for k, _v in chunk]
    assert merged == [b"g", b"f", b"e", b"d", b"c", b"b", b"a"]


def test_a_negation_of_a_run_another_session_dissolved_meanwhile_is_not_lost(
    pg_url: str,
) -> None:
    # Given a run, dissolved into single rows by another session whose transaction is
    # still open (another instance's purge or negation, under way)
    store = PostgresStore(pg_url, name="a")
    try:
        store.write([(b"m", _key(i), b"v") for i in range(10)], new_keys=True)
        other = psycopg.connect(pg_url)
        other.execute(
            "WITH g AS (DELETE FROM tms_run RETURNING t, ks, vs) INSERT INTO tms_kv (t, k, v) "
            "SELECT g.t, e.k, e.v FROM g CROSS JOIN LATERAL unnest(g.ks, g.vs) AS e (k, v)"
        )
        # When this store negates an entry of the run meanwhile (it waits on the run)
        done: list[object] = []
        writer = threading.Thread(
            target=lambda: done.append(store.write((), updates=[(b"m", _key(3), b"negated")]))
        )
        writer.start()
        _eventually(lambda: _waiting_on_a_lock(pg_url, "a-write"))
        other.commit()
        other.close()
        writer.join(30)
        # Then the negation is there, on the single row the entry became
        assert done == [None]
        assert store.table(b"m").get(_key(3)) == b"negated"
        assert [v for _k, v in store.table(b"m").scan()] == [b"v"] * 3 + [b"negated"] + [b"v"] * 6
    finally:
        store.close()


def test_a_database_written_before_runs_is_read_and_written_on(pg_url: str) -> None:
    # Given a database in the layout before runs: every row in tms_kv, no tms_run
    topic = TopicId("ns", "old")
    svc = MessagingService(PostgresStore(pg_url))
    svc.create_topic(topic)
    for i in range(3):
        svc.publish(StoreRequest(topic, [b"old%d-%d" % (i, j) for j in range(5)]))
    svc.close()
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO tms_kv (t, k, v) SELECT r.t, e.k, e.v FROM tms_run r "
            "CROSS JOIN LATERAL unnest(r.ks, r.vs) AS e (k, v)"
        )
        conn.execute("DROP TABLE tms_run")
    # When this version opens it and publishes on
    svc = MessagingService(PostgresStore(pg_url))
    try:
        svc.publish(StoreRequest(topic, [b"new-%d" % j for j in range(5)]))
        # Then the old rows are read as they were, and the new ones after them
        payloads = [m.payload for m in svc.fetch(topic).messages]
        old = [b"old%d-%d" % (i, j) for i in range(3) for j in range(5)]
        assert payloads == old + [b"new-%d" % j for j in range(5)]
        assert _rows(pg_url, "tms_run") == 1
    finally:
        svc.close()
