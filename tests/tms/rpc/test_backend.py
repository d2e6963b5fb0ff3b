"""``Backend``'s answers to the writes of one loop turn: each is answered on its own,
whatever happens to another's (an answer that cannot be made, a reply that fails) or to
the turn as a whole (its group commit's future cancelled)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tms.errors import TmsError
from tms.model import TopicId
from tms.rpc.backend import Backend
from tms.rpc.frames import rpc
from tms.rpc.ops import BY_CODE, Op
from tms.rpc.writes import EMPTY_BODY
from tms.service import MessagingService
from tms.store.memory import MemoryStore

T = TopicId("ns", "t")
PUBLISH = BY_CODE[1]
WAIT_S = 10.0


@pytest.fixture
def svc() -> Iterator[MessagingService]:
    service = MessagingService(MemoryStore())
    service.create_topic(T)
    yield service
    service.close()


def one_turn(svc: MessagingService, n: int, op: Op, done: Callable[[int, Any], None]) -> None:
    """``n`` publishes dispatched in one turn of a loop, waiting (at most ``WAIT_S``) until
    each was answered through ``done(i, answer)``; how many were is asserted."""

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as pool:
            backend = Backend(svc, pool, loop, max_wait_ms=1000, max_poll_bytes=1 << 20)
            answered = 0
            all_answered = loop.create_future()

            def answer(i: int, response: Any) -> None:
                nonlocal answered
                answered += 1
                if answered == n:
                    all_answered.set_result(None)
                done(i, response)

            for i in range(n):
                req = rpc.PublishRequest(ns="ns", topic="t", payloads=[b"m%d" % i])
                backend.dispatch(op, req, T, None, lambda r, i=i: answer(i, r))
            try:
                await asyncio.wait_for(all_answered, WAIT_S)
            finally:
                backend.close()
            return answered

    assert asyncio.run(scenario()) == n


def stored(svc: MessagingService) -> list[bytes]:
    return [m.payload for m in svc.fetch(T).messages]


def test_an_answer_that_cannot_be_made_fails_alone(svc: MessagingService) -> None:
    # Given a turn of four publishes whose second answer cannot be made (a bug)
    calls = 0

    def answer(detail: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("no answer")
        return PUBLISH.answer(detail)  # type: ignore[misc]

    answers: dict[int, Any] = {}
    one_turn(svc, 4, dataclasses.replace(PUBLISH, answer=answer), answers.__setitem__)
    # Then it is answered with the error (an internal error), and the others as usual
    assert isinstance(answers[1], RuntimeError)
    assert [answers[i] for i in (0, 2, 3)] == [EMPTY_BODY] * 3
    assert stored(svc) == [b"m0", b"m1", b"m2", b"m3"]


def test_a_reply_that_fails_keeps_no_other_unanswered(svc: MessagingService) -> None:
    # Given a turn whose first reply fails (its connection's send raises)
    answers: dict[int, Any] = {}

    def done(i: int, response: Any) -> None:
        answers[i] = response
        if i == 0:
            raise RuntimeError("the reply failed")

    one_turn(svc, 3, PUBLISH, done)
    # Then the others are answered all the same
    assert answers == {0: EMPTY_BODY, 1: EMPTY_BODY, 2: EMPTY_BODY}


def test_a_cancelled_turn_answers_each_write_with_an_error(
    svc: MessagingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a turn whose group commit's future is cancelled (fault injection)
    submit = svc.submit_tickets

    def cancelled(*args: Any) -> asyncio.Future[None]:
        settled = submit(*args)
        settled.cancel()
        return settled

    monkeypatch.setattr(svc, "submit_tickets", cancelled)
    answers: dict[int, Any] = {}
    one_turn(svc, 3, PUBLISH, answers.__setitem__)
    # Then each write is answered with an error saying so
    assert sorted(answers) == [0, 1, 2]
    for response in answers.values():
        assert isinstance(response, TmsError) and "cancelled" in str(response)


def dispatched_together(
    svc: MessagingService, writes: list[tuple[Any, float | None]], topic: TopicId = T
) -> list[Any]:
    """Publishes (request, deadline) to ``topic`` dispatched in one turn of a loop; their
    answers, in order (each waited for at most ``WAIT_S``)."""

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as pool:
            backend = Backend(svc, pool, loop, max_wait_ms=1000, max_poll_bytes=1 << 20)
            answers = [loop.create_future() for _ in writes]
            for (req, deadline), answer in zip(writes, answers, strict=True):
                backend.dispatch(PUBLISH, req, topic, deadline, answer.set_result)
            try:
                return list(await asyncio.wait_for(asyncio.gather(*answers), WAIT_S))
            finally:
                backend.close()

    return asyncio.run(scenario())


def plain(payload: bytes, *more: bytes) -> Any:
    return rpc.PublishRequest(ns="ns", topic="t", payloads=[payload, *more])


def writer_operations(svc: MessagingService) -> float:
    return svc.metrics.value("tms_writer_batch_operations_sum")


def test_plain_publishes_of_a_turn_are_one_operation_each_answered_and_counted(
    svc: MessagingService,
) -> None:
    # When five plain publishes (one of two messages) arrive in one turn
    answers = dispatched_together(
        svc,
        [(plain(b"a"), None), (plain(b"b", b"c"), None)]
        + [(plain(b"d%d" % i), None) for i in range(3)],
    )
    # Then the writer gets one operation, each request its own answer, the metrics each
    # request, and the messages are stored in call order
    assert answers == [EMPTY_BODY] * 5
    assert writer_operations(svc) == 1
    assert svc.metrics.value("tms_requests_total", {"op": "publish", "outcome": "ok"}) == 5
    assert svc.metrics.value("tms_operation_seconds_count", {"op": "publish"}) == 5
    assert stored(svc) == [b"a", b"b", b"c", b"d0", b"d1", b"d2"]


def test_a_publish_that_is_not_plain_keeps_its_place_between_runs(svc: MessagingService) -> None:
    # Given a publish with a TTL between plain ones, in one turn
    ttl = rpc.PublishRequest(ns="ns", topic="t", payloads=[b"ttl"], ttls=[60])
    answers = dispatched_together(
        svc, [(plain(b"p0"), None), (plain(b"p1"), None), (ttl, None), (plain(b"p2"), None)]
    )
    # Then it is written on its own, in its place: three operations, in call order
    assert answers == [EMPTY_BODY] * 4
    assert writer_operations(svc) == 3
    assert stored(svc) == [b"p0", b"p1", b"ttl", b"p2"]


def test_a_run_past_its_deadline_is_dropped_and_the_others_written(svc: MessagingService) -> None:
    # Given plain publishes of one turn, the middle two already past their deadline
    past = time.monotonic() - 1
    answers = dispatched_together(
        svc,
        [
            (plain(b"kept0"), None),
            (plain(b"late0"), past),
            (plain(b"late1"), past),
            (plain(b"kept1"), None),
        ],
    )
    # Then the late ones are each answered request_timeout, unwritten; the others written
    assert answers[0] == answers[3] == EMPTY_BODY
    for late in answers[1:3]:
        assert isinstance(late, TmsError) and late.code == "request_timeout"
    assert stored(svc) == [b"kept0", b"kept1"]
    assert svc.metrics.value("tms_requests_total", {"op": "publish", "outcome": "error"}) == 2


def test_a_run_that_fails_answers_each_of_its_requests(svc: MessagingService) -> None:
    # Given a topic that is a queue (a plain publish to it fails, for every request alike)
    q = TopicId("ns", "q")
    svc.create_topic(q, {"kind": "queue"})
    reqs = [rpc.PublishRequest(ns="ns", topic="q", payloads=[b"x%d" % i]) for i in range(3)]
    # When three plain publishes to it arrive in one turn
    answers = dispatched_together(svc, [(req, None) for req in reqs], q)
    # Then each request is answered with the error
    assert len(answers) == 3
    for answer in answers:
        assert isinstance(answer, TmsError) and answer.code == "invalid_argument"
