"""The PostgreSQL engine beyond the shared contract: two handles on one database (as two
service instances are), a fence taken while a fenced write is under way, a write
connection killed under the store (``pg_terminate_backend``), and changes told between
instances (LISTEN/NOTIFY)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from tms.errors import FencedError, StorageUnavailableError
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.postgres import PostgresStore
from tms.store.postgres.notify import PgChangeFeed
from txms_testing import PostgresCluster


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    a = PostgresStore(pg_url, name="a", shared=True)
    b = PostgresStore(pg_url, name="b", shared=True)
    yield a, b
    a.close()
    b.close()


def _eventually(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _waiting_on_a_lock(url: str, application: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (application,),
        ).fetchone()
    return row is not None and row[0] > 0


def test_a_newer_fence_from_another_handle_refuses_the_older_owner(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    epoch_a = a.acquire_fence(b"topic")
    a.write([(b"m", b"1", b"a")], fence=(b"topic", epoch_a))
    epoch_b = b.acquire_fence(b"topic")
    assert epoch_b == epoch_a + 1
    with pytest.raises(FencedError):
        a.write([(b"m", b"2", b"a")], fence=(b"topic", epoch_a))
    b.write([(b"m", b"2", b"b")], fence=(b"topic", epoch_b))
    assert list(a.table(b"m").scan()) == [(b"1", b"a"), (b"2", b"b")]


def test_taking_a_fence_waits_for_a_fenced_write_under_way(
    two: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    # Given a fenced write of store a held up inside its transaction (after its fence
    # check: a row it writes is locked by an uncommitted insert of another session)
    a, b = two
    epoch = a.acquire_fence(b"topic")
    blocker = psycopg.connect(pg_url)
    blocker.execute("INSERT INTO tms_kv (t, k, v) VALUES ('m', 'k', 'blocker')")
    outcome: list[object] = []
    writer = threading.Thread(
        target=lambda: outcome.append(a.write([(b"m", b"k", b"a")], fence=(b"topic", epoch)))
    )
    writer.start()
    _eventually(lambda: _waiting_on_a_lock(pg_url, "a-write"))
    # When store b takes the fence meanwhile
    seen_at_takeover: list[bytes | None] = []

    def take_over() -> None:
        b.acquire_fence(b"topic")
        seen_at_takeover.append(b.table(b"m").get(b"k"))

    taker = threading.Thread(target=take_over)
    taker.start()
    _eventually(lambda: seen_at_takeover or _waiting_on_a_lock(pg_url, "b-fence"))
    blocker.rollback()
    blocker.close()
    writer.join(30)
    taker.join(30)
    # Then the write a's fence let through was in the store when b's fence was taken:
    # nothing of the old owner lands after the new one took over
    assert outcome == [None]
    assert seen_at_takeover == [b"a"] == [a.table(b"m").get(b"k")]


def test_a_failed_write_takes_the_store_down_until_it_reconnects(pg_url: str) -> None:
    store = PostgresStore(pg_url, name="victim", retry_interval_s=0)
    try:
        table = store.table(b"m")
        table.write([(b"1", b"v")])
        epoch = store.epoch
        # When the server ends the store's write connection
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'victim-write'"
            )
        # Then the next write fails (its outcome unknown) ...
        with pytest.raises(StorageUnavailableError):
            table.write([(b"2", b"v")], epoch=epoch)
        # ... and the store comes back under a new epoch: writes prepared before refused
        assert table.get(b"1") == b"v"
        assert store.epoch == epoch + 1
        with pytest.raises(StorageUnavailableError):
            table.write([(b"3", b"stale")], epoch=epoch)
        table.write([(b"3", b"v")], epoch=store.epoch)
        assert [k for k, _ in table.scan()] == [b"1", b"3"]
    finally:
        store.close()


def test_a_store_that_lost_its_connection_writes_nothing_while_another_holds_the_database(
    pg_url: str,
) -> None:
    # Given an instance alone on a database, whose write connection the server ends
    first = PostgresStore(pg_url, name="first", retry_interval_s=0)
    try:
        first.table(b"m").write([(b"1", b"v")])
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'first-write'"
            )
        # and a second instance that starts meanwhile (the lock went with the session)
        second = PostgresStore(pg_url, name="second")
        try:
            # When the first one writes again
            for _ in range(3):
                with pytest.raises(StorageUnavailableError):
                    first.table(b"m").write([(b"2", b"lost")])
            # Then none of it landed: it cannot reconnect while the second holds the lock
            assert second.table(b"m").get(b"2") is None
        finally:
            second.close()
        # and once the second is gone, it takes the database back
        first.table(b"m").write([(b"3", b"v")])
        assert [k for k, _ in first.table(b"m").scan()] == [b"1", b"3"]
    finally:
        first.close()


def test_an_unreachable_server_is_storage_unavailable() -> None:
    with pytest.raises(StorageUnavailableError):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", timeout_s=1)


def test_a_waiter_on_one_instance_wakes_on_a_publish_through_another(pg_url: str) -> None:
    # Given two services on one database, telling each other of changes
    topic = TopicId("ns", "t")
    writer = MessagingService(
        PostgresStore(pg_url, name="w", shared=True), feed=PgChangeFeed(pg_url, name="w")
    )
    reader = MessagingService(
        PostgresStore(pg_url, name="r", shared=True), feed=PgChangeFeed(pg_url, name="r")
    )
    try:
        writer.create_topic(topic)
        seen = reader.version(topic)
        woke: list[int] = []
        waiter = threading.Thread(
            target=lambda: woke.append(reader.wait_for_change(topic, seen, 60))
        )
        waiter.start()
        # When the other one publishes
        writer.publish(StoreRequest(topic, [b"x"]))
        waiter.join(90)
        # Then the waiter woke with a new version, and reads what was published
        assert woke and woke[0] != seen
        assert [m[1] for m in reader.fetch(topic).messages] == [b"x"]
        # and a listener that lost its connection tells every waiter to look again
        seen = reader.version(topic)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'r-listen'"
            )
        assert reader.wait_for_change(topic, seen, 60) != seen
    finally:
        writer.close()
        reader.close()


def test_overwrites_and_a_stale_fence_leave_no_error_in_the_server_log(
    pg_cluster: PostgresCluster, pg_url: str
) -> None:
    log = pg_cluster.dir / "server.log"
    start = log.stat().st_size
    store = PostgresStore(pg_url)
    svc = MessagingService(store)
    try:
        # Given a topic's first writes, a changed topic and rows written again
        topic = TopicId("ns", "t")
        svc.create_topic(topic)
        svc.publish(StoreRequest(topic, [b"a"]))
        svc.update_topic(topic, {"ttl": "60"})
        store.write([(b"x", b"k", b"1")])
        store.write([(b"x", b"new", b"2"), (b"x", b"k", b"3")])
        # and a write under a superseded fence
        old = store.acquire_fence(b"f")
        store.acquire_fence(b"f")
        with pytest.raises(FencedError):
            store.write([(b"x", b"fenced", b"4")], fence=(b"f", old))
        assert store.table(b"x").get(b"k") == b"3" and store.table(b"x").get(b"fenced") is None
    finally:
        svc.close()
    # Then PostgreSQL logged no error for any of it
    with log.open("rb") as f:
        f.seek(start)
        assert b"ERROR" not in f.read()


def test_sizes_are_estimated_from_statistics_once_the_table_has_them(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        table = store.table(b"m")
        table.write([(b"a%04d" % i, bytes(1000)) for i in range(300)])
        table.write([(b"b%04d" % i, bytes(1000)) for i in range(60)])
        exact = (table.approximate_size(b"a", b"b"), table.approximate_size(b"b", b"c"))
        assert exact == (300 * 1005, 60 * 1005)  # no statistics yet: summed
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("ANALYZE tms_kv")
        estimated = (table.approximate_size(b"a", b"b"), table.approximate_size(b"b", b"c"))
        assert store.analyzed()
        assert estimated[0] > estimated[1] > 0
        assert exact[0] / 3 < estimated[0] < exact[0] * 3
    finally:
        store.close()
