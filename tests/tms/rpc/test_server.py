"""The binary protocol's server, spoken to frame by frame: the hello, answers in any
order, the REST API's error codes, back-pressure, dropped late requests, timeouts, and
bad frames that end their own connection only."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from tests.tms.rpc.conftest import NOW, Raw, Served, T, error_of
from tms.model import StoreRequest, TopicId
from tms.rpc.config import RpcConfig
from tms.rpc.frames import Kind, decode_body, encode_body, encode_frame, rpc


def publish(*payloads: bytes, topic: str = "t", ns: str = "ns", wp: int | None = None) -> Any:
    return rpc.PublishRequest(ns=ns, topic=topic, payloads=list(payloads), write_pointer=wp)


def poll(**fields: Any) -> Any:
    return rpc.PollRequest(ns="ns", topic="t", **fields)


def test_the_hello_is_answered_with_the_servers_limits(served: Served, raw: Raw) -> None:
    frame = raw.hello()
    assert (frame.kind, frame.op, frame.flags, frame.request_id) == (Kind.RESPONSE, 0, 0, 1)
    welcome = decode_body(rpc.Welcome, frame.body)
    assert welcome.version == 1
    assert welcome.max_in_flight == served.server.config.max_in_flight
    assert welcome.http_port == int(served.http_url.rsplit(":", 1)[1])
    assert welcome.http_tls is False


def test_the_first_request_must_be_hello(raw: Raw) -> None:
    raw.request(1, publish(b"x"))
    frame = raw.frame()
    assert frame.kind == Kind.GOAWAY and error_of(frame)[0] == "handshake_required"
    assert raw.closed()


def test_an_unsupported_version_is_refused(raw: Raw) -> None:
    raw.request(0, rpc.Hello(version=2))
    assert error_of(raw.frame())[0] == "invalid_argument"
    assert raw.frame().kind == Kind.GOAWAY
    assert raw.closed()


def test_publish_then_poll(served: Served, raw: Raw) -> None:
    raw.hello()
    rid = raw.request(1, publish(b"a", b"b"))
    frame = raw.frame()
    assert (frame.kind, frame.request_id, frame.flags) == (Kind.RESPONSE, rid, 0)
    assert decode_body(rpc.PublishResponse, frame.body).rollback is None
    raw.request(5, poll())
    answer = decode_body(rpc.PollResponse, raw.frame().body)
    assert answer.payloads == [b"a", b"b"] and answer.held is False
    assert [m.id_bytes for m in served.service.fetch(T).messages] == answer.ids


def test_a_poll_of_small_messages_fits_in_a_frame(make_rpc: Any) -> None:
    # Given a topic of many empty messages, and the smallest frames the server allows
    served = make_rpc(RpcConfig(port=0, max_frame_bytes=4096))
    served.service.publish(StoreRequest.of(T, [b""] * 1000))
    raw = Raw(served.address)
    try:
        raw.hello()
        # When a client polls without a limit, from each answer's last id
        ids: list[bytes] = []
        while len(ids) < 1000:
            start = {"start_id": ids[-1], "inclusive": False} if ids else {}
            raw.request(5, poll(**start))
            frame = raw.frame()
            # Then every answer fits in a frame the client accepts, and together they
            # are the topic
            assert (
                len(encode_frame(frame.kind, frame.op, frame.request_id, body=frame.body)) <= 4096
            )
            answer = decode_body(rpc.PollResponse, frame.body)
            assert answer.ids
            ids += answer.ids
        assert ids == [m.id_bytes for m in served.service.fetch(T).messages]
    finally:
        raw.close()


def test_answers_come_back_in_any_order(served: Served, raw: Raw) -> None:
    # Given a long poll waiting on the connection
    raw.hello()
    waiting = raw.request(5, poll(wait_ms=10_000))
    # When a publish follows it on the same connection
    published = raw.request(1, publish(b"late"))
    # Then the publish is answered first, and the poll wakes with its message
    first, second = raw.frame(), raw.frame()
    assert (first.request_id, second.request_id) == (published, waiting)
    assert decode_body(rpc.PollResponse, second.body).payloads == [b"late"]


def test_ping_is_answered_with_pong(raw: Raw) -> None:
    raw.hello()
    raw.send(encode_frame(Kind.PING, 0, 77))
    frame = raw.frame()
    assert (frame.kind, frame.request_id) == (Kind.PONG, 77)


@pytest.mark.parametrize(
    ("op", "body", "code"),
    [
        (5, rpc.PollRequest(ns="ns", topic="nope"), "topic_not_found"),
        (1, publish(b"x", topic="bad topic"), "invalid_argument"),
        (1, publish(b"x", ns="bad-ns"), "invalid_argument"),
        (1, publish(), "invalid_argument"),  # an empty publish outside a transaction
        (1, rpc.PublishRequest(ns="ns", topic="t"), "invalid_argument"),  # no payloads
        (2, publish(b"x"), "invalid_argument"),  # store without a write pointer
        (5, poll(limit=0), "invalid_argument"),
        (5, poll(wait_ms=10**8), "invalid_argument"),
        (5, poll(start_id=b"short"), "invalid_argument"),
        (5, poll(start_id=bytes(20), start_ms=1), "invalid_argument"),
        (5, poll(transaction=b"\xff"), "bad_encoding"),
        (3, rpc.RollbackRequest(ns="ns", topic="t"), "invalid_argument"),
        (4, rpc.MarkersRequest(ns="ns", topic="t", write_pointers=[]), "invalid_argument"),
        (0, rpc.Hello(version=1), "invalid_argument"),  # a second hello
        (99, rpc.Empty(), "unsupported_operation"),
    ],
)
def test_bad_requests_get_the_rest_apis_error_codes_and_change_nothing(
    served: Served, raw: Raw, op: int, body: Any, code: str
) -> None:
    raw.hello()
    rid = raw.request(op, body)
    frame = raw.frame()
    assert frame.request_id == rid and error_of(frame)[0] == code
    raw.send(encode_frame(Kind.PING, 0, 5))
    assert raw.frame().kind == Kind.PONG  # the connection goes on
    assert served.service.fetch(T).messages == []


def test_a_body_that_does_not_decode_is_bad_encoding(raw: Raw) -> None:
    raw.hello()
    raw.send(encode_frame(Kind.REQUEST, 1, 3, b"\x0f\x00\x04\x0b\x7f\xff\xff\xff"))
    assert error_of(raw.frame())[0] == "bad_encoding"


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x01x",  # length below the header
        b"\xff\xff\xff\xff",  # over max_frame_bytes
        encode_frame(9, 0, 1),  # no such kind
        encode_frame(Kind.RESPONSE, 0, 1),  # a client does not send responses
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not this protocol
    ],
)
def test_a_bad_frame_ends_that_connection_only(served: Served, garbage: bytes) -> None:
    good, bad = Raw(served.address), Raw(served.address)
    try:
        good.hello()
        bad.hello()
        bad.send(garbage)
        frame = bad.frame()
        assert frame.kind == Kind.GOAWAY and error_of(frame)[0] == "bad_frame"
        assert bad.closed()
        good.request(1, publish(b"still here"))
        assert good.frame().flags == 0
    finally:
        good.close()
        bad.close()


def test_back_pressure_stops_reading_a_connection_at_its_in_flight_limit(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0, max_in_flight=2))
    raw, other = Raw(served.address), Raw(served.address)
    try:
        raw.hello()
        other.hello()
        # Given two long polls in flight, the limit
        polls = [raw.request(5, poll(wait_ms=10_000)) for _ in range(2)]
        # When a publish follows on the same connection
        held = raw.request(1, publish(b"held"))
        time.sleep(0.3)
        # Then it is not read: nothing is stored
        assert served.service.fetch(T).messages == []
        # and once the polls are answered (woken by another connection's publish) it is
        other.request(1, publish(b"other"))
        assert other.frame().flags == 0
        answered = [raw.frame().request_id for _ in range(3)]
        assert sorted(answered) == sorted([*polls, held])
        assert [m.payload for m in served.service.fetch(T).messages] == [b"other", b"held"]
    finally:
        raw.close()
        other.close()


def test_a_write_that_waited_past_its_timeout_is_dropped_unwritten(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0))
    raw = Raw(served.address)
    raw.hello()
    # Given a write stuck in a stalled disk
    served.store.gate.clear()
    first = raw.request(1, publish(b"first"))
    assert served.store.waiting.wait(10)
    # When a publish with a 50 ms timeout queues behind it for longer
    late = raw.request(1, publish(b"late"), timeout_ms=50)
    time.sleep(0.3)
    served.store.gate.set()
    # Then it is dropped and says so; the first is written
    answers = {f.request_id: f for f in (raw.frame(), raw.frame())}
    raw.close()
    assert answers[first].flags == 0
    assert error_of(answers[late])[0] == "request_timeout"
    assert [m.payload for m in served.service.fetch(T).messages] == [b"first"]


def test_a_read_that_waited_past_its_timeout_is_dropped(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0, worker_threads=1))
    raw = Raw(served.address)
    try:
        raw.hello()
        served.store.read_gate.clear()
        raw.request(5, poll())  # holds the only worker thread, reading a stalled disk
        assert served.store.reading.wait(10)
        late = raw.request(5, poll(), timeout_ms=50)
        time.sleep(0.3)
        served.store.read_gate.set()
        answers = {f.request_id: f for f in (raw.frame(), raw.frame())}
        assert error_of(answers[late])[0] == "request_timeout"
    finally:
        raw.close()


def test_an_idle_connection_is_closed_but_not_one_with_a_poll_waiting(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0, idle_timeout_s=0.3))
    idle, busy = Raw(served.address), Raw(served.address)
    try:
        idle.hello()
        busy.hello()
        rid = busy.request(5, poll(wait_ms=1000))
        frame = idle.frame()
        assert frame.kind == Kind.GOAWAY and error_of(frame)[0] == "idle_timeout"
        assert idle.closed()
        assert busy.frame().request_id == rid  # the poll ran its course
    finally:
        idle.close()
        busy.close()


def test_no_hello_in_time_closes(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0, handshake_timeout_s=0.3))
    raw = Raw(served.address)
    try:
        assert error_of(raw.frame())[0] == "handshake_timeout"
        assert raw.closed()
    finally:
        raw.close()


def test_an_unfinished_frame_times_out(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0, frame_timeout_s=0.3))
    raw = Raw(served.address)
    try:
        raw.hello()
        raw.send(encode_frame(Kind.REQUEST, 1, 2, encode_body(publish(b"x")))[:10])
        assert error_of(raw.frame())[0] == "frame_timeout"
        assert raw.closed()
    finally:
        raw.close()


def test_stopping_answers_waiting_polls_then_says_goaway(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0))
    raw = Raw(served.address)
    try:
        raw.hello()
        rid = raw.request(5, poll(wait_ms=30_000))
        time.sleep(0.1)
        started = time.monotonic()
        served.thread.stop()
        frame = raw.frame()
        assert frame.request_id == rid and error_of(frame)[0] == "unavailable"
        assert error_of(raw.frame())[0] == "shutting_down"
        assert time.monotonic() - started < 10
    finally:
        raw.close()


def test_a_client_that_vanishes_mid_request_harms_nothing(served: Served) -> None:
    raw = Raw(served.address)
    raw.hello()
    raw.request(5, poll(wait_ms=500))
    raw.request(1, publish(b"gone"))
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    raw.close()  # a reset
    time.sleep(0.6)
    other = Raw(served.address)
    try:
        other.hello()
        other.request(5, poll())
        assert decode_body(rpc.PollResponse, other.frame().body).payloads in ([b"gone"], [])
    finally:
        other.close()


def test_the_clock_of_the_service_dates_messages(served: Served, raw: Raw) -> None:
    raw.hello()
    raw.request(1, publish(b"x"))
    raw.frame()
    assert served.service.fetch(T).messages[0].publish_ms == NOW


def test_writes_arriving_together_are_each_answered_in_order(served: Served, raw: Raw) -> None:
    # Given a second topic whose writer is not open yet
    u = TopicId("ns", "u")
    served.service.create_topic(u)
    raw.hello()
    # When publishes to both topics, one to a missing topic and one with a write pointer
    # the manager never gave arrive in one segment (one turn of the server's loop)
    requests = [publish(b"t%d" % i) for i in range(20)] + [
        publish(b"u%d" % i, topic="u") for i in range(20)
    ]
    requests.insert(7, publish(b"lost", topic="missing"))
    requests.insert(30, publish(b"forged", wp=(NOW + 3_600_000) * 10**6))
    frames = b"".join(
        encode_frame(Kind.REQUEST, 1, rid, encode_body(body))
        for rid, body in enumerate(requests, start=100)
    )
    raw.send(frames)
    answers = {f.request_id: f for f in (raw.frame() for _ in requests)}
    # Then each gets its own answer, and each topic holds its messages in the order sent
    assert error_of(answers[107])[0] == "topic_not_found"
    assert error_of(answers[130])[0] == "transaction_not_in_progress"
    assert all(answers[rid].flags == 0 for rid in answers if rid not in (107, 130))
    assert [m.payload for m in served.service.fetch(T).messages] == [b"t%d" % i for i in range(20)]
    assert [m.payload for m in served.service.fetch(u).messages] == [b"u%d" % i for i in range(20)]


def test_publishes_read_together_are_each_answered_in_order(served: Served, raw: Raw) -> None:
    # Given a connection that published to the topic before (its plain publishes to it
    # are read as runs)
    raw.hello()
    raw.request(1, publish(b"first"))
    assert raw.frame().flags == 0
    # When one segment holds plain publishes with two timeouts, a traced one, a ping and
    # one that is not plain (two messages, one with a TTL) between them
    frames = [
        encode_frame(Kind.REQUEST, 1, 10 + i, encode_body(publish(b"a%d" % i))) for i in range(5)
    ]
    frames += [
        encode_frame(Kind.REQUEST, 1, 20 + i, encode_body(publish(b"b%d" % i)), timeout_ms=60_000)
        for i in range(3)
    ]
    frames.append(encode_frame(Kind.REQUEST, 1, 30, encode_body(publish(b"traced")), trace=(1, 2)))
    frames.append(encode_frame(Kind.PING, 0, 31))
    ttl = rpc.PublishRequest(ns="ns", topic="t", payloads=[b"t0", b"t1"], ttls=[0, 60])
    frames.append(encode_frame(Kind.REQUEST, 1, 32, encode_body(ttl)))
    frames += [
        encode_frame(Kind.REQUEST, 1, 40 + i, encode_body(publish(b"c%d" % i, b"d%d" % i)))
        for i in range(4)
    ]
    before = served.service.metrics.value("tms_requests_total", {"op": "publish", "outcome": "ok"})
    raw.send(b"".join(frames))
    answers = {f.request_id: f for f in (raw.frame() for _ in frames)}
    # Then each is answered on its own, with its id, and counted; the messages are
    # stored in the order sent
    publishes = [*range(10, 15), *range(20, 23), 30, 32, *range(40, 44)]
    assert sorted(answers) == sorted([*publishes, 31])
    assert answers[31].kind == Kind.PONG
    assert all(
        (answers[r].kind, answers[r].op, answers[r].flags) == (Kind.RESPONSE, 1, 0)
        for r in publishes
    )
    after = served.service.metrics.value("tms_requests_total", {"op": "publish", "outcome": "ok"})
    assert after - before == len(publishes)
    expected = [b"first", *(b"a%d" % i for i in range(5)), *(b"b%d" % i for i in range(3))]
    expected += [b"traced", b"t0", b"t1"]
    for i in range(4):
        expected += [b"c%d" % i, b"d%d" % i]
    assert [m.payload for m in served.service.fetch(T).messages] == expected


def test_publishes_read_together_that_wait_too_long_each_get_the_error(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0))
    raw = Raw(served.address)
    raw.hello()
    raw.request(1, publish(b"known"))
    assert raw.frame().flags == 0
    # Given a write stuck in a stalled disk
    served.store.gate.clear()
    first = raw.request(1, publish(b"first"))
    assert served.store.waiting.wait(10)
    # When publishes with a 50 ms timeout arrive together and queue behind it for longer
    late = list(range(100, 110))
    raw.send(
        b"".join(
            encode_frame(Kind.REQUEST, 1, rid, encode_body(publish(b"late")), timeout_ms=50)
            for rid in late
        )
    )
    time.sleep(0.3)
    served.store.gate.set()
    # Then each is dropped and says so, with its own id; the first is written
    answers = {f.request_id: f for f in (raw.frame() for _ in range(11))}
    raw.close()
    assert sorted(answers) == sorted([first, *late])
    assert answers[first].flags == 0
    assert all(error_of(answers[rid])[0] == "request_timeout" for rid in late)
    assert [m.payload for m in served.service.fetch(T).messages] == [b"known", b"first"]
