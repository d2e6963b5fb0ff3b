"""CDAP's ConcurrentMessageWriterTest, plus ordering across clock steps and restarts."""

from __future__ import annotations

import threading
from typing import TypeVar

import pytest

from tests.fakes import FakeClock
from tests.tms.helpers import IncrementalClock
from tms.codec import keys
from tms.errors import StorageUnavailableError, TmsInvalidArgumentError
from tms.guard import ClockGuard
from tms.model import RollbackDetail, StoreRequest, TopicId
from tms.operations import Operation, Publish, Rollback, Store, Ticket
from tms.store.kv import KeyValueStore
from tms.store.tables import Tables
from tms.writer import TopicWriter
from txms_common.clock import Clock

R = TypeVar("R")

T1, T2 = TopicId("default", "t1"), TopicId("default", "t2")


class Writer:
    """A ``TopicWriter`` called one operation at a time, as the service does."""

    def __init__(self, writer: TopicWriter) -> None:
        self.writer = writer

    def _one(self, op: Operation[R]) -> R:
        ticket = Ticket(op)
        self.writer.submit([ticket])
        return ticket.result()

    def publish(self, request: StoreRequest) -> RollbackDetail | None:
        return self._one(Publish(request))

    def store(self, request: StoreRequest) -> None:
        self._one(Store(request))

    def rollback(self, detail: RollbackDetail) -> int:
        return self._one(Rollback(self.writer.metadata.topic, detail))

    def close(self) -> None:
        self.writer.close()


def writer(tables: Tables, topic: TopicId, clock: Clock) -> Writer:
    meta = (
        tables.metadata.create(topic, {})
        if not tables.metadata.list_topics(topic.namespace)
        or topic not in tables.metadata.list_topics(topic.namespace)
        else tables.metadata.get(topic)
    )
    # Any positive pointer of the past is accepted (these tests use small ones).
    return Writer(TopicWriter(tables, meta, clock, ClockGuard(clock, 0), max_lifetime_ms=10**15))


def positions(tables: Tables, topic: TopicId) -> list[tuple[int, int]]:
    return [(r.publish_ms, r.seq) for r in tables.messages.scan(keys.topic_prefix(topic, 1))]


def test_basic(tables: Tables) -> None:
    clock = IncrementalClock()
    w1, w2 = writer(tables, T1, clock), writer(tables, T2, clock)
    w1.publish(StoreRequest.of(T1, ["a", "b", "c"]))
    w2.publish(StoreRequest.of(T2, ["d"]))
    assert positions(tables, T1) == [(0, 0), (0, 1), (0, 2)]
    assert positions(tables, T2) == [(1, 0)]


def test_max_sequence_rolls_to_the_next_millisecond(tables: Tables) -> None:
    w = writer(tables, T1, IncrementalClock())
    w.publish(StoreRequest.of(T1, [b"%d" % i for i in range(65537)]))
    got = positions(tables, T1)
    assert got[:65536] == [(0, i) for i in range(65536)]
    assert got[65536] == (1, 0)


def test_clock_going_back_never_reorders(tables: Tables) -> None:
    clock = FakeClock(1_000)
    w = writer(tables, T1, clock)
    w.publish(StoreRequest.of(T1, ["a"]))
    clock.set(500)
    w.publish(StoreRequest.of(T1, ["b"]))
    assert positions(tables, T1) == [(1000, 0), (1000, 1)]


def test_restart_resumes_after_the_newest_row(tables: Tables) -> None:
    clock = FakeClock(1_000)
    writer(tables, T1, clock).publish(StoreRequest.of(T1, ["a", "b"]))
    clock.set(10)  # a new process whose clock is far behind
    writer(tables, T1, clock).publish(StoreRequest.of(T1, ["c"]))
    assert positions(tables, T1) == [(1000, 0), (1000, 1), (1000, 2)]


def test_each_request_is_contiguous_under_concurrency(tables: Tables) -> None:
    w = writer(tables, T1, FakeClock())
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            for i in range(20):
                w.publish(StoreRequest.of(T1, [f"{n}:{i}:{j}" for j in range(50)]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = list(tables.messages.scan(keys.topic_prefix(T1, 1)))
    assert len(rows) == 8 * 20 * 50
    keys_in_order = [(r.publish_ms, r.seq) for r in rows]
    assert keys_in_order == sorted(set(keys_in_order))
    payloads = [r.entry.payload.decode() for r in rows if r.entry.payload is not None]
    for start in range(0, len(payloads), 50):
        block = payloads[start : start + 50]
        assert [p.rsplit(":", 1)[1] for p in block] == [str(j) for j in range(50)]
        assert len({p.rsplit(":", 1)[0] for p in block}) == 1


def test_rollback_detail_covers_exactly_the_request(tables: Tables) -> None:
    w = writer(tables, T1, FakeClock(7))
    w.publish(StoreRequest.of(T1, ["x"]))
    detail = w.publish(StoreRequest.of(T1, ["a", "b", "c"], tx_write_pointer=42))
    assert detail is not None
    assert (detail.start_ms, detail.start_seq, detail.end_ms, detail.end_seq) == (7, 1, 7, 3)
    assert w.rollback(detail) == 3
    assert w.rollback(detail) == 0


def test_commit_marker_seals_its_write_pointer_and_is_idempotent(tables: Tables) -> None:
    w = writer(tables, T1, FakeClock(5))
    w.store(StoreRequest.of(T1, ["p1"], tx_write_pointer=9))
    first = w.publish(StoreRequest.of(T1, [], tx_write_pointer=9))
    again = w.publish(StoreRequest.of(T1, [], tx_write_pointer=9))
    assert first == again
    assert len(positions(tables, T1)) == 1
    with pytest.raises(TmsInvalidArgumentError, match="already published its commit marker"):
        w.store(StoreRequest.of(T1, ["late"], tx_write_pointer=9))
    # once the marker is rolled back, a new one may be published
    assert first is not None and w.rollback(first) == 1
    third = w.publish(StoreRequest.of(T1, [], tx_write_pointer=9))
    assert third != first and len(positions(tables, T1)) == 2


def test_invalid_requests_fail_alone(tables: Tables) -> None:
    w = writer(tables, T1, FakeClock())
    with pytest.raises(TmsInvalidArgumentError, match="Empty payload"):
        w.publish(StoreRequest.of(T1, []))
    with pytest.raises(TmsInvalidArgumentError, match="must be transactional with payload"):
        w.store(StoreRequest.of(T1, ["x"]))
    with pytest.raises(TmsInvalidArgumentError):
        w.store(StoreRequest.of(T1, [], tx_write_pointer=3))


def test_storage_failure_fails_the_batch_and_writes_nothing(kv: KeyValueStore) -> None:
    tables = Tables(kv)
    w = writer(tables, T1, FakeClock())
    kv.close()
    with pytest.raises(StorageUnavailableError):
        w.publish(StoreRequest.of(T1, ["x"]))


def test_closed_writer_refuses(tables: Tables) -> None:
    w = writer(tables, T1, FakeClock())
    w.close()
    with pytest.raises(StorageUnavailableError, match="closed"):
        w.publish(StoreRequest.of(T1, ["x"]))
