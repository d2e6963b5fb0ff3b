"""The filter's rules, and reads (fetch and bounds) applying them on every case."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.fakes import FakeClock
from tests.tms.helpers import tx
from tms.fetcher import FetchRequest
from tms.filter import FilterResult, accept
from tms.model import StoreRequest, TopicId
from tms.service import MessagingService
from tms.store.memory import MemoryStore

T = TopicId("ns", "f")


def test_rules() -> None:
    reader = tx(100, 200, invalids=(50,), in_progress=(80,))
    assert accept(None, 5) is FilterResult.ACCEPT
    assert accept(reader, None) is FilterResult.ACCEPT
    assert accept(reader, -30) is FilterResult.SKIP
    assert accept(reader, 30) is FilterResult.ACCEPT
    assert accept(reader, 200) is FilterResult.ACCEPT  # own write
    assert accept(reader, 50) is FilterResult.SKIP
    assert accept(reader, 80) is FilterResult.HOLD
    assert accept(reader, 150) is FilterResult.HOLD


pointers = st.sampled_from([None, 10, 20, 30, 40, 50, 60])


@given(
    ptrs=st.lists(st.tuples(pointers, st.booleans()), min_size=1, max_size=12),
    invalids=st.sets(st.sampled_from([20, 40, 60]), max_size=2),
    in_progress=st.sets(st.sampled_from([30, 50]), max_size=2),
)
def test_fetcher_agrees_with_the_filter(
    ptrs: list[tuple[int | None, bool]], invalids: set[int], in_progress: set[int]
) -> None:
    svc = MessagingService(MemoryStore(), clock=FakeClock(1_000_000))
    svc.create_topic(T)
    for i, (ptr, rolled_back) in enumerate(ptrs):
        detail = svc.publish(StoreRequest(T, [b"%d" % i], tx_write_pointer=ptr))
        if rolled_back and detail is not None:
            svc.rollback(T, detail)
    reader = tx(45, 45, tuple(invalids), tuple(in_progress))
    expected: list[bytes] = []
    held = False
    for i, (ptr, rolled_back) in enumerate(ptrs):
        verdict = accept(reader, -ptr if ptr is not None and rolled_back else ptr)
        if verdict is FilterResult.HOLD:
            held = True
            break
        if verdict is FilterResult.ACCEPT:
            expected.append(b"%d" % i)
    result = svc.fetch(T, FetchRequest(transaction=reader))
    assert [m.payload for m in result.messages] == expected
    assert result.held == held
