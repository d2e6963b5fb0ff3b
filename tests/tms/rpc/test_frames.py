"""Frames of the binary protocol: golden bytes of every frame kind and of the bodies,
built field by field from docs/rpc.md; round trips; what is refused."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.client.channel import error_of
from tms.errors import NotOwnerError, TmsCodecError
from tms.rpc.frames import (
    FLAG_ERROR,
    FLAG_TRACED,
    Frame,
    FrameError,
    Kind,
    decode_body,
    encode_body,
    encode_error,
    encode_frame,
    plain_names,
    plain_publish,
    plain_publish_body,
    read_frames,
    rpc,
)
from tms.rpc.ops import BY_CODE, OPS

MAX = 1 << 20


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def head(length: int, kind: int, op: int, flags: int, rid: int, timeout_ms: int) -> bytes:  # noqa: PLR0917
    return u32(length) + bytes([kind, op]) + struct.pack(">H", flags) + u32(rid) + u32(timeout_ms)


def thrift_string(field: int, text: str) -> bytes:
    data = text.encode()
    return b"\x0b" + struct.pack(">h", field) + u32(len(data)) + data


ERROR_BODY = thrift_string(1, "topic_not_found") + thrift_string(2, "no t") + b"\x00"
ERROR = encode_error("topic_not_found", "no t")
NOT_OWNER_BODY = (
    thrift_string(1, "not_owner") + thrift_string(2, "m") + thrift_string(3, "tms://h:1") + b"\x00"
)

GOLDEN = [
    (  # a publish request with a queue timeout of 250 ms
        encode_frame(Kind.REQUEST, 1, 7, b"BODY", timeout_ms=250),
        head(16, 1, 1, 0, 7, 250) + b"BODY",
    ),
    (  # a traced poll request: trace id 1, span id 2 after the header
        encode_frame(Kind.REQUEST, 5, 1, b"", trace=(1, 2)),
        head(28, 1, 5, FLAG_TRACED, 1, 0) + struct.pack(">QQ", 1, 2),
    ),
    (  # a successful response: an empty struct
        encode_frame(Kind.RESPONSE, 1, 7, b"\x00"),
        head(13, 2, 1, 0, 7, 0) + b"\x00",
    ),
    (  # an error response
        encode_frame(Kind.RESPONSE, 5, 9, ERROR, flags=FLAG_ERROR),
        head(12 + len(ERROR_BODY), 2, 5, FLAG_ERROR, 9, 0) + ERROR_BODY,
    ),
    (encode_frame(Kind.PING, 0, 3), head(12, 3, 0, 0, 3, 0)),
    (encode_frame(Kind.PONG, 0, 3), head(12, 4, 0, 0, 3, 0)),
    (
        encode_frame(Kind.GOAWAY, 0, 0, ERROR, flags=FLAG_ERROR),
        head(12 + len(ERROR_BODY), 5, 0, FLAG_ERROR, 0, 0) + ERROR_BODY,
    ),
]


@pytest.mark.parametrize(("encoded", "expected"), GOLDEN)
def test_golden_frames(encoded: bytes, expected: bytes) -> None:
    assert encoded == expected
    frames, used = read_frames(expected, MAX)
    assert used == len(expected) and len(frames) == 1


def test_golden_not_owner_error_names_the_owner() -> None:
    assert encode_error("not_owner", "m", "tms://h:1") == NOT_OWNER_BODY
    assert encode_error("not_owner", "m", "") == encode_error("not_owner", "m")  # no field 3
    frame = Frame(Kind.RESPONSE, 1, FLAG_ERROR, 9, 0, None, NOT_OWNER_BODY)
    error = error_of(frame)
    assert isinstance(error, NotOwnerError) and error.owner_rpc == "tms://h:1"


def test_every_frame_kind_has_a_golden_vector() -> None:
    assert {e[4] for e, _ in GOLDEN} == {int(k) for k in Kind}


def test_golden_bodies() -> None:
    publish = rpc.PublishRequest(ns="n", topic="t", payloads=[b"ab"])
    assert encode_body(publish) == (
        thrift_string(1, "n") + thrift_string(2, "t")
        + b"\x0f\x00\x04\x0b" + u32(1) + u32(2) + b"ab" + b"\x00"
    )  # fmt: skip
    mid = bytes(range(20))
    poll = rpc.PollResponse(ids=[mid], payloads=[b"p"], held=True)
    assert encode_body(poll) == (
        b"\x0f\x00\x01\x0b" + u32(1) + u32(20) + mid
        + b"\x0f\x00\x02\x0b" + u32(1) + u32(1) + b"p"
        + b"\x02\x00\x03\x01" + b"\x00"
    )  # fmt: skip
    hello = rpc.Hello(version=1, token="s")
    assert encode_body(hello) == b"\x08\x00\x01" + u32(1) + thrift_string(2, "s") + b"\x00"


def thrift_binary(field: int, data: bytes) -> bytes:
    return b"\x0b" + struct.pack(">h", field) + u32(len(data)) + data


def test_golden_subscription_bodies() -> None:
    """The bodies of ops 9-11 as docs/rpc.md spells them."""
    at = bytes(range(20))
    sub = thrift_string(1, "n") + thrift_string(2, "t") + thrift_string(3, "s")
    poll = rpc.SubPollRequest(
        ns="n", topic="t", name="s", start=at, limit=100, wait_ms=1000, commit_version=3
    )
    assert encode_body(poll) == (
        sub + thrift_binary(4, at)
        + b"\x08\x00\x05" + u32(100) + b"\x08\x00\x07" + u32(1000)
        + b"\x0a\x00\x08" + struct.pack(">q", 3) + b"\x00"
    )  # fmt: skip
    answer = rpc.SubPollResponse(
        ids=[at], payloads=[b"p"], held=True, held_finished=False, start=at, position=at, version=4
    )
    assert encode_body(answer) == (
        b"\x0f\x00\x01\x0b" + u32(1) + u32(20) + at
        + b"\x0f\x00\x02\x0b" + u32(1) + u32(1) + b"p"
        + b"\x02\x00\x03\x01" + b"\x02\x00\x04\x00"
        + thrift_binary(5, at) + thrift_binary(6, at)
        + b"\x0a\x00\x07" + struct.pack(">q", 4) + b"\x00"
    )  # fmt: skip
    commit = rpc.SubCommitRequest(
        ns="n", topic="t", name="s", position=at, version=7, transaction=b"tx"
    )
    assert encode_body(commit) == (
        sub + thrift_binary(4, at) + b"\x0a\x00\x05" + struct.pack(">q", 7)
        + thrift_binary(6, b"tx") + b"\x00"
    )  # fmt: skip
    state = rpc.SubscriptionState(
        version=8, position=at, updated_ms=5, generation=1, preferences="{}"
    )
    assert encode_body(state) == (
        b"\x0a\x00\x01" + struct.pack(">q", 8) + thrift_binary(2, at)
        + b"\x0a\x00\x04" + struct.pack(">q", 5) + b"\x0a\x00\x05" + struct.pack(">q", 1)
        + thrift_string(6, "{}") + b"\x00"
    )  # fmt: skip
    written = rpc.PositionWritten(write_pointer=9)
    assert encode_body(written) == b"\x0a\x00\x01" + struct.pack(">q", 9) + b"\x00"


def thrift_i32(field: int, value: int) -> bytes:
    return b"\x08" + struct.pack(">hi", field, value)


def thrift_i64(field: int, value: int) -> bytes:
    return b"\x0a" + struct.pack(">hq", field, value)


def test_golden_queue_bodies() -> None:
    """The bodies of the queue's ops (7, 8, 12-14) as docs/rpc.md spells them."""
    queue = thrift_string(1, "n") + thrift_string(2, "q")
    mid = bytes(range(10))
    receive = rpc.ReceiveRequest(ns="n", topic="q", max=10, lease_ms=30_000, wait_ms=1000)
    assert encode_body(receive) == (
        queue + thrift_i32(3, 10) + thrift_i32(4, 30_000) + thrift_i32(5, 1000) + b"\x00"
    )
    enqueue = rpc.EnqueueRequest(
        ns="n", topic="q", payloads=[b"ab", b"c"], keys=["k", ""], at_ms=[-1, 5],
        write_pointer=7,
    )  # fmt: skip
    assert encode_body(enqueue) == (
        queue
        + b"\x0f\x00\x03\x0b" + u32(2) + u32(2) + b"ab" + u32(1) + b"c"
        + b"\x0f\x00\x04\x0b" + u32(2) + u32(1) + b"k" + u32(0)
        + b"\x0f\x00\x06\x0a" + u32(2) + struct.pack(">qq", -1, 5)
        + thrift_i64(8, 7) + b"\x00"
    )  # fmt: skip
    enqueued = rpc.EnqueueResponse(ids=[mid], duplicates=[True])
    assert encode_body(enqueued) == (
        b"\x0f\x00\x01\x0b" + u32(1) + u32(10) + mid
        + b"\x0f\x00\x02\x02" + u32(1) + b"\x01" + b"\x00"
    )  # fmt: skip
    nack = rpc.NackRequest(ns="n", topic="q", ids=[mid], attempts=[2], delay_ms=500)
    assert encode_body(nack) == (
        queue + b"\x0f\x00\x03\x0b" + u32(1) + u32(10) + mid
        + b"\x0f\x00\x04\x08" + u32(1) + u32(2) + thrift_i64(5, 500) + b"\x00"
    )  # fmt: skip
    outcomes = rpc.AckResponse(outcomes=["returned"])
    assert encode_body(outcomes) == (b"\x0f\x00\x01\x0b" + u32(1) + u32(8) + b"returned" + b"\x00")
    settle = rpc.SettleRequest(ns="n", topic="q", write_pointer=7, commit=True)
    assert encode_body(settle) == queue + thrift_i64(3, 7) + b"\x02\x00\x04\x01" + b"\x00"
    assert encode_body(rpc.SettleResponse(settled=3)) == thrift_i32(1, 3) + b"\x00"


def test_a_traced_frame_reads_back_with_its_trace() -> None:
    data = encode_frame(Kind.REQUEST, 5, 4, b"xyz", timeout_ms=9, trace=(2**64 - 1, 5))
    (frame,), _ = read_frames(data, MAX)
    assert frame == Frame(1, 5, FLAG_TRACED, 4, 9, (2**64 - 1, 5), b"xyz")


frames_st = st.builds(
    Frame,
    st.sampled_from([int(k) for k in Kind]),
    st.integers(0, 255),
    st.integers(0, 0xFFFF).map(lambda f: f & ~FLAG_TRACED),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.none() | st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
    st.binary(max_size=64),
)


def _encode(frame: Frame) -> bytes:
    return encode_frame(
        frame.kind, frame.op, frame.request_id, frame.body,
        flags=frame.flags, timeout_ms=frame.timeout_ms, trace=frame.trace,
    )  # fmt: skip


@given(st.lists(frames_st, max_size=8), st.data())
def test_a_stream_of_frames_reads_back_in_any_cut(frames: list[Frame], data: st.DataObject) -> None:
    stream = b"".join(_encode(f) for f in frames)
    expected = [f._replace(flags=f.flags | (FLAG_TRACED if f.trace else 0)) for f in frames]
    got, used = read_frames(stream, MAX)
    assert got == expected and used == len(stream)
    cut = data.draw(st.integers(0, len(stream)))
    prefix, used = read_frames(stream[:cut], MAX)
    assert prefix == expected[: len(prefix)]
    assert used == sum(len(_encode(f)) for f in frames[: len(prefix)])
    limited, _ = read_frames(stream, MAX, limit=1)
    assert limited == expected[:1]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (u32(11) + b"\x01" * 11, "bad frame length 11"),
        (u32(MAX + 1), "bad frame length"),
        (u32(2**32 - 1) + b"\x01", "bad frame length"),
        (head(12, 9, 0, 0, 1, 0), "unknown frame kind 9"),
        (head(12, 0, 0, 0, 1, 0), "unknown frame kind 0"),
        (head(12, 1, 1, FLAG_TRACED, 1, 0), "without its trace"),
    ],
)
def test_what_is_not_a_frame(data: bytes, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        read_frames(data, MAX)


def test_an_unfinished_frame_waits() -> None:
    whole = encode_frame(Kind.PING, 0, 1)
    assert read_frames(whole[:-1], MAX) == ([], 0)
    assert read_frames(b"", MAX) == ([], 0)


@given(st.sampled_from([op.request for op in OPS] + [rpc.PollResponse, rpc.Error]), st.binary())
def test_bodies_that_do_not_decode_raise_codec_errors_only(cls: object, data: bytes) -> None:
    with contextlib.suppress(TmsCodecError):
        decode_body(cls, data)


def test_a_list_claiming_two_billion_items_is_refused_without_allocating_them() -> None:
    body = b"\x0f\x00\x04\x0b" + u32(2**31 - 1)
    with pytest.raises(TmsCodecError):
        decode_body(rpc.PublishRequest, body)


def test_golden_plain_publish() -> None:
    names = thrift_string(1, "n") + thrift_string(2, "t")
    body = names + b"\x0f\x00\x04\x0b" + u32(2) + u32(2) + b"ab" + u32(0) + b"\x00"
    assert plain_publish(body) == (names, [b"ab", b""])


def utf8(name: str | bytes) -> bytes:
    return name.encode() if isinstance(name, str) else name


publish_requests = st.builds(
    rpc.PublishRequest,
    ns=st.text(max_size=12),
    topic=st.text(max_size=12),
    write_pointer=st.none() | st.integers(1, 2**62),
    payloads=st.none() | st.lists(st.binary(max_size=20), max_size=4),
    ttls=st.none() | st.lists(st.integers(0, 2**31 - 1), max_size=4),
)


@given(publish_requests)
def test_a_plain_publish_reads_as_decode_body_does(req: object) -> None:
    # Given any publish request, as the clients encode it
    body = encode_body(req)
    decoded = decode_body(rpc.PublishRequest, body)
    plain = plain_publish(body)
    # Then the fast reading takes exactly the plain ones, and reads what decode_body does
    is_plain = bool(decoded.payloads) and decoded.write_pointer is None and decoded.ttls is None
    assert (plain is not None) == is_plain
    if plain is not None:
        names = thrift_string(1, decoded.ns) + thrift_string(2, decoded.topic)
        assert plain == (names, decoded.payloads)


@given(st.text(max_size=12), st.text(max_size=12), st.lists(st.binary(max_size=20), min_size=1))
def test_a_plain_publish_body_is_what_encode_body_writes(
    ns: str, topic: str, payloads: list[bytes]
) -> None:
    body = plain_publish_body(plain_names(ns, topic), payloads)
    assert body == encode_body(rpc.PublishRequest(ns=ns, topic=topic, payloads=payloads))
    assert plain_publish(body) == (plain_names(ns, topic), payloads)


@given(publish_requests.filter(lambda r: r.payloads), st.data())
def test_a_damaged_plain_publish_is_left_to_decode_body(req: object, data: st.DataObject) -> None:
    # Given a plain publish's body, cut short, lengthened, or with one byte changed
    body = encode_body(req)
    damaged = data.draw(
        st.sampled_from(
            [
                body[: data.draw(st.integers(0, len(body) - 1))],
                body + data.draw(st.binary(min_size=1, max_size=4)),
                bytearray(body),
            ]
        )
    )
    if isinstance(damaged, bytearray):
        i = data.draw(st.integers(0, len(body) - 1))
        damaged[i] ^= data.draw(st.integers(1, 255))
        damaged = bytes(damaged)
    # Then what the fast reading says is never other than what decode_body reads (names
    # that are not UTF-8 read as bytes: the server takes names from the fast reading only
    # when it has seen them make a valid topic before)
    plain = plain_publish(damaged)
    if plain is not None:
        decoded = decode_body(rpc.PublishRequest, damaged)
        names = thrift_binary(1, utf8(decoded.ns)) + thrift_binary(2, utf8(decoded.topic))
        assert plain == (names, decoded.payloads)
        assert decoded.write_pointer is None and decoded.ttls is None


def test_op_codes_are_the_documented_ones() -> None:
    assert {code: op.name for code, op in BY_CODE.items()} == {
        0: "hello", 1: "publish", 2: "store", 3: "rollback", 4: "markers", 5: "poll", 6: "bounds",
        7: "receive", 8: "ack", 9: "sub_poll", 10: "sub_commit",
        11: "sub_position", 12: "enqueue", 13: "nack", 14: "settle",
    }  # fmt: skip
