"""``bounds`` with a limit: it counts what a read with that limit would return (commit
markers row by row, without reading payloads) and says where the next read resumes (the
entry or staged row after the last one counted). Checked against the fetch itself, on
random topics (Hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes import FakeClock
from tests.tms.helpers import tx
from tms.config import TmsConfig
from tms.fetcher import FetchRequest
from tms.model import MarkersRequest, StoreRequest, TopicBounds, TopicId
from tms.service import MessagingService
from tms.store.memory import MemoryStore

T = TopicId("ns", "t")
OPEN = 10_000  # a write pointer the reader sees in progress
READER = tx(20_000, 20_001, invalids=(13,), in_progress=(OPEN,))

# a topic: inline publishes (plain or transactional) and commit markers of staged rows
entries = st.lists(
    st.one_of(
        st.tuples(st.just("inline"), st.integers(1, 4), st.sampled_from([None, 11, 13])),
        st.tuples(st.just("marker"), st.integers(0, 5), st.sampled_from([12, 13])),
    ),
    max_size=12,
)


def build(layout: list[tuple[str, int, int | None]], hold: bool) -> MessagingService:
    clock = FakeClock()
    svc = MessagingService(MemoryStore(), TmsConfig(tx_max_lifetime_s=10**10), clock=clock)
    svc.create_topic(T)
    for n, (kind, count, wp) in enumerate(layout):
        clock.advance(n % 2)  # some entries share a millisecond
        payloads = [f"{n}.{i}" for i in range(count)]
        if kind == "inline":
            svc.publish(StoreRequest.of(T, payloads, tx_write_pointer=wp))
        else:
            assert wp is not None
            pointer = wp * 100 + n  # one staged write pointer per marker
            if payloads:
                svc.store(StoreRequest.of(T, payloads, tx_write_pointer=pointer))
            svc.publish_markers(MarkersRequest(T, (pointer,)))
    if hold:
        svc.publish(StoreRequest.of(T, ["open"], tx_write_pointer=OPEN))
        svc.publish(StoreRequest.of(T, ["behind"]))
    return svc


@settings(max_examples=150, deadline=None)
@given(entries, st.booleans(), st.booleans(), st.integers(0, 30), st.integers(1, 8))
def test_counted_and_after_limit_agree_with_the_fetch(
    layout: list[tuple[str, int, int | None]],
    hold: bool,
    transactional: bool,
    start_at: int,
    limit: int,
) -> None:
    svc = build(layout, hold)
    reader = READER if transactional else None
    everything = svc.fetch(T, FetchRequest(transaction=reader)).messages
    start = everything[start_at].id if start_at < len(everything) else None

    bounds = svc.bounds(T, FetchRequest(start_id=start, limit=limit, transaction=reader))
    read = svc.fetch(T, FetchRequest(start_id=start, limit=limit, transaction=reader)).messages
    assert bounds.counted == len(read)
    rest = everything[everything.index(read[-1]) + 1 :] if read else None
    if bounds.after_limit is not None:
        # the limit was reached: a read from after_limit continues exactly after it
        assert bounds.counted == limit
        resumed = svc.fetch(T, FetchRequest(start_id=bounds.after_limit, transaction=reader))
        assert resumed.messages == rest
    else:
        more = svc.fetch(T, FetchRequest(start_id=start, limit=limit + 1, transaction=reader))
        assert len(more.messages) <= limit
    # without a limit, nothing is counted and the answer is what it always was
    plain = svc.bounds(T, FetchRequest(start_id=start, transaction=reader))
    assert plain.counted is None and plain.after_limit is None
    if bounds.after_limit is None:
        assert (bounds.first, bounds.last, bounds.held) == (plain.first, plain.last, plain.held)


def test_a_limit_inside_a_commit_marker() -> None:
    svc = build([("inline", 2, None), ("marker", 5, 12), ("inline", 1, None)], hold=False)
    ids = [m.id for m in svc.fetch(T).messages]  # 2 inline, 5 staged rows, 1 inline
    bounds = svc.bounds(T, FetchRequest(limit=4))
    marker = (ids[2].publish_ms, ids[2].seq)
    assert bounds == TopicBounds((ids[0].publish_ms, ids[0].seq), marker, None, 4, ids[4])
    # resuming inside the marker, exclusive of the last message read
    after = svc.bounds(T, FetchRequest(start_id=ids[3], inclusive=False, limit=3))
    assert (after.counted, after.after_limit) == (3, ids[7])
