"""A queue over the binary protocol (ops 7, 8, 12-14): the same messages, receipts,
outcomes and errors as over REST, through ``MessagingClient("tms://...")``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes import FakeClock
from tests.tms.rpc.conftest import NOW, Raw, Served, error_of, refused
from tms.client import MessagingClient
from tms.client.queue import Queue
from tms.client.rpc import RpcMessagingClient
from tms.errors import TmsError, TmsInvalidArgumentError
from tms.model import TopicId
from tms.queues import AckOutcome, EnqueueItem, EnqueueRequest, QueueMessage, Receipt
from tms.rpc.config import RpcConfig
from tms.rpc.frames import FLAG_ERROR, decode_body, rpc
from tms.rpc.ops import BY_NAME

Q = TopicId("ns", "jobs")


def test_receive_and_ack_travel_as_binary_requests(served: Served, monkeypatch: Any) -> None:
    served.service.create_topic(Q, {"kind": "queue", "lease_s": "60"})
    with MessagingClient(served.url) as binary, MessagingClient(served.http_url) as http:
        assert isinstance(binary, RpcMessagingClient)
        http.queue(Q).enqueue([b"a", EnqueueItem(b"b", key="k", priority=1)])
        # REST must not be used for receive and ack
        monkeypatch.setattr(binary, "_request", None)
        got = binary.queue(Q).receive(5)
        assert [(m.payload, m.attempt, m.key) for m in got] == [(b"a", 1, None), (b"b", 1, "k")]
        assert all(m.lease_expires_ms == served.clock.now_ms() + 60_000 for m in got)
        assert binary.queue(Q).ack([got[0]]) == [AckOutcome.ACKED]
        assert binary.queue(Q).ack([got[0], got[1]]) == [AckOutcome.ACKED, AckOutcome.ACKED]
        assert binary.queue(Q).receive(5) == []
    stats = served.service.queue_stats(Q)
    assert (stats.acked, stats.leased) == (2, 0)


def test_a_receive_of_a_plain_topic_is_refused(served: Served) -> None:
    with (
        MessagingClient(served.url) as binary,
        pytest.raises(TmsInvalidArgumentError, match="not a queue"),
    ):
        binary.queue(TopicId("ns", "t")).receive(1)
    raw = Raw(served.address)
    raw.hello()
    raw.request(BY_NAME["ack"].code, rpc.AckRequest(ns="ns", topic="t", ids=[b"x"], attempts=[]))
    frame = raw.frame()
    assert b"invalid_argument" in frame.body
    raw.close()


def _scenario(queue: Queue, clock: FakeClock) -> list[Any]:
    """Every queue call a worker or a producer makes, and what each answered, with ids
    replaced by their order of appearance (the two queues' ids differ)."""
    names: dict[bytes, int] = {}

    def name(mid: bytes) -> int:
        return names.setdefault(mid, len(names))

    def seen(messages: list[QueueMessage]) -> list[Any]:
        return [
            (name(m.id), m.payload, m.attempt, m.due_ms, m.priority, m.lease_expires_ms, m.key)
            for m in messages
        ]

    out: list[Any] = []
    enqueued = queue.enqueue([
        b"a", EnqueueItem(b"b", key="k", priority=1), EnqueueItem(b"c", delay_ms=5_000),
        EnqueueItem(b"d", at_ms=NOW + 1), EnqueueItem(b"e", key="k2", at_ms=0, priority=2),
    ])  # fmt: skip
    out.append([(name(e.id), e.duplicate) for e in enqueued])
    again = queue.enqueue([EnqueueItem(b"b2", key="k")])
    out.append([(name(e.id), e.duplicate) for e in again])
    got = queue.receive(2, lease_s=10)
    out.append(seen(got))
    out.append(queue.ack([got[0]]))
    out.append(queue.nack([got[1]], delay_s=1))
    out.append(queue.nack([got[1]]))  # no longer leased by that attempt
    clock.advance(6_000)
    rest = queue.receive(10, wait_s=1)
    out.append(seen(rest))
    out.append(queue.ack([rest[0], got[0]]))
    out.append(queue.nack(rest[1:]))
    wp = clock.now_ms() * 1_000_000
    pending = queue.enqueue([b"f"], tx_write_pointer=wp)
    out.append([(name(e.id), e.duplicate) for e in pending])
    out.append(queue.settle(wp, commit=True))
    out.append(queue.settle(wp, commit=True))
    out.append(seen(queue.receive(10)))
    out.append(queue.receive(1, wait_s=0.05))
    stats = queue.stats()
    out.append((stats.pending, stats.scheduled, stats.ready, stats.leased, stats.acked))
    return out


def _errors(queue: Queue) -> list[Any]:
    """What each bad call raises: the class and the message."""
    receipt = Receipt(bytes(10), 1)
    calls: list[Callable[[], object]] = [
        lambda: queue.receive(0),
        lambda: queue.receive(1, lease_s=-1),
        lambda: queue.receive(1, wait_s=3600),
        lambda: queue.enqueue([EnqueueItem(b"x", key="dup"), EnqueueItem(b"y", key="dup")]),
        lambda: queue.enqueue([EnqueueItem(b"x", key="t")], tx_write_pointer=NOW * 10**6 + 1),
        lambda: queue.enqueue([EnqueueItem(b"y", key="t")], tx_write_pointer=NOW * 10**6 + 2),
        lambda: queue.ack([receipt, receipt]),
        lambda: queue.nack([receipt], delay_s=-1),
        lambda: queue.settle(-5, commit=True),
        lambda: Queue(queue.client, TopicId("ns", "t")).enqueue([b"x"]),
        lambda: Queue(queue.client, TopicId("ns", "t")).nack([receipt]),
        lambda: Queue(queue.client, TopicId("ns", "none")).settle(5, commit=False),
    ]
    out: list[Any] = []
    for call in calls:
        try:
            out.append(("ok", call()))
        except TmsError as exc:
            out.append((type(exc).__name__, str(exc).rsplit(": ", 1)[-1]))
    return out


@pytest.mark.parametrize("check", [_scenario, _errors], ids=["answers", "errors"])
def test_binary_and_rest_answer_alike(make_rpc: Any, check: Callable[..., list[Any]]) -> None:
    # Given two services on the same clock, a queue each, one used over each protocol
    answers = []
    for protocol in ("binary", "rest"):
        served = make_rpc(RpcConfig(port=0))
        served.service.create_topic(Q, {"kind": "queue", "lease_s": "60", "backoff_s": "2"})
        url = served.url if protocol == "binary" else served.http_url
        with MessagingClient(url, retries=0) as client:
            if protocol == "binary":  # nothing goes over REST but the stats
                client._request = _only_stats(client._request)  # type: ignore[method-assign]
            args = (client.queue(Q), served.clock) if check is _scenario else (client.queue(Q),)
            answers.append(check(*args))
    # Then the same answers and the same errors
    assert answers[0] == answers[1]


def _only_stats(request: Callable[..., Any]) -> Callable[..., Any]:
    def only(method: str, url: str, **kwargs: Any) -> Any:
        assert method == "GET" and url.endswith("/queue"), f"{method} {url} went over REST"
        return request(method, url, **kwargs)

    return only


def test_receive_waits_over_the_binary_protocol(served: Served) -> None:
    # Given a worker waiting on an empty queue over the binary protocol
    served.service.create_topic(Q, {"kind": "queue"})
    with MessagingClient(served.url) as binary:
        got: list[list[QueueMessage]] = []
        waiting = threading.Thread(target=lambda: got.append(binary.queue(Q).receive(5, wait_s=30)))
        waiting.start()
        time.sleep(0.2)  # let it wait (if it had not started yet, it finds the message)
        # When a message is enqueued
        binary.queue(Q).enqueue([b"wake up"])
        waiting.join(30)
        # Then the waiting receive gets it; and one that finds nothing ends at its wait
        assert [m.payload for m in got[0]] == [b"wake up"]
        assert binary.queue(Q).receive(1, wait_s=0.05) == []


def test_a_wait_past_the_servers_limit_is_refused(raw: Raw, served: Served) -> None:
    served.service.create_topic(Q, {"kind": "queue"})
    raw.hello()
    raw.request(7, rpc.ReceiveRequest(ns="ns", topic="jobs", max=1, wait_ms=10**9))
    code, message = error_of(raw.frame())
    assert code == "invalid_argument" and "wait_ms" in message
    assert served.service.queue_stats(Q).leased == 0


def test_stopping_does_not_cut_short_a_receive_being_written(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0))
    served.service.create_topic(Q, {"kind": "queue", "lease_s": "60"})
    served.service.enqueue(EnqueueRequest(Q, [EnqueueItem(b"m")]))
    raw = Raw(served.address)
    stopping = threading.Thread(target=served.thread.stop)
    try:
        raw.hello()
        # Given a receive that may wait, its lease being written on a disk that stalls
        served.store.gate.clear()
        rid = raw.request(7, rpc.ReceiveRequest(ns="ns", topic="jobs", max=1, wait_ms=30_000))
        assert served.store.waiting.wait(10)
        # When the server stops meanwhile (it cancels what waits, then closes nothing
        # until the requests under way are answered)
        stopping.start()
        assert refused(served.address)
        served.store.gate.set()
        # Then the receive answers with the message it leased, not with an error
        frame = raw.frame()
        assert frame.request_id == rid and not frame.flags & FLAG_ERROR, frame
        assert decode_body(rpc.ReceiveResponse, frame.body).payloads == [b"m"]
    finally:
        served.store.gate.set()
        raw.close()
        if stopping.is_alive():
            stopping.join(60)
    assert served.service.queue_stats(Q).leased == 1


def test_stopping_cuts_short_a_receive_that_waits(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0))
    served.service.create_topic(Q, {"kind": "queue"})
    raw = Raw(served.address)
    try:
        raw.hello()
        # Given a receive waiting on an empty queue (it was served once: now it waits)
        rid = raw.request(7, rpc.ReceiveRequest(ns="ns", topic="jobs", max=1, wait_ms=30_000))
        served_once = {"op": "receive", "outcome": "ok"}
        for _ in range(1000):
            if served.service.metrics.value("tms_requests_total", served_once):
                break
            time.sleep(0.01)
        else:
            pytest.fail("the receive was not served")
        # When the server stops, Then it is answered at once: the server is stopping
        started = time.monotonic()
        served.thread.stop()
        frame = raw.frame()
        assert frame.request_id == rid and error_of(frame)[0] == "unavailable"
        assert time.monotonic() - started < 10
    finally:
        raw.close()
