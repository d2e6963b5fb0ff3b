"""The sans-I/O core of the binary protocol's clients (``tms.client.rpccore``): the bytes
a call sends, and the decisions of its tries, checked without a socket or a sleep."""

from __future__ import annotations

import struct
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.client import rpccore as core
from tms.client.channel import ChannelError
from tms.client.owners import OwnerRoutes
from tms.errors import NotOwnerError, ServiceUnavailableError, TopicNotFoundError
from tms.model import TopicId
from tms.rpc.endpoints import Address, Endpoints
from tms.rpc.frames import FLAG_ERROR, Frame, Kind, encode_body, encode_error, rpc
from tms.rpc.values import publish_request

TOPIC = TopicId("n", "t")
T = TypeVar("T")


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def thrift_string(field: int, text: str) -> bytes:
    data = text.encode()
    return b"\x0b" + struct.pack(">h", field) + u32(len(data)) + data


def test_golden_plain_publish_call() -> None:
    # A plain publish (no transaction, no TTLs) is the fast body, byte for byte
    call = core.publish(TOPIC, [b"ab", ""])
    names = thrift_string(1, "n") + thrift_string(2, "t")
    assert call.body == names + b"\x0f\x00\x04\x0b" + u32(2) + u32(2) + b"ab" + u32(0) + b"\x00"
    assert call.body == encode_body(rpc.PublishRequest(ns="n", topic="t", payloads=[b"ab", b""]))
    assert call.op is core.PUBLISH
    assert call.retry_lost is False  # a publish's lost answer is not resent


@given(
    st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True),
    st.lists(st.binary(max_size=16), max_size=12),
    st.none() | st.integers(1, 2**62),
    st.none() | st.lists(st.none() | st.integers(0, 2**31 - 1), max_size=4),
)
def test_every_publish_call_sends_what_encode_body_writes(
    name: str, payloads: list[bytes], write_pointer: int | None, ttls: list[int | None] | None
) -> None:
    topic = TopicId("ns", name)
    call = core.publish(topic, payloads, write_pointer, ttls)
    assert call.body == encode_body(publish_request(topic, payloads, write_pointer, ttls))
    assert call.retry_lost == (write_pointer is not None and not payloads)


class _Pool:
    """The pool a try would use: only its ``Endpoints`` matter to the core."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints

    def close(self) -> None:
        pass


class _Channel:
    def __init__(self, address: Address, dead: bool) -> None:
        self.address, self.dead = address, dead


def attempts(call: core.Call[T], retries: int = 2) -> core.Attempts[T]:
    return core.Attempts(call, routes(), timeout_s=2.0, retries=retries, backoff_s=0.5)


def routes() -> OwnerRoutes[_Pool]:
    return OwnerRoutes(_Pool(Endpoints([("h", 1)])), _Pool, lambda address: Endpoints([address]))


def answer(body: bytes, *, error: bool = False) -> Frame:
    return Frame(int(Kind.RESPONSE), 1, FLAG_ERROR if error else 0, 1, 0, None, body)


def test_a_call_waits_for_its_answer_as_long_as_the_server_may_hold_it() -> None:
    tries = attempts(core.poll(TOPIC, None, True, None, None, 1500))
    assert tries.timeout_s == 3.5  # timeout + wait
    assert tries.queue_ms == 1000  # the server drops it unstarted after half the timeout


def test_an_answer_reads_as_the_clients_answer() -> None:
    tries = attempts(core.settle(TOPIC, 7, True))
    assert tries.answered(answer(encode_body(rpc.SettleResponse(settled=3)))) == 3


def test_a_request_that_never_left_is_sent_again_after_a_growing_pause() -> None:
    tries = attempts(core.publish(TOPIC, [b"x"]))
    pool = tries.pool()
    first = tries.failed(pool, None, ChannelError("refused", sent=False))
    second = tries.failed(pool, None, ChannelError("refused", sent=False))
    assert isinstance(first, core.Pause) and isinstance(second, core.Pause)
    assert 0 < first.seconds <= second.seconds
    with pytest.raises(ServiceUnavailableError):  # retries spent
        tries.failed(pool, None, ChannelError("refused", sent=False))


def test_a_publish_whose_answer_was_lost_says_the_outcome_is_unknown() -> None:
    tries = attempts(core.publish(TOPIC, [b"x"]))
    channel = _Channel(("h", 1), dead=True)
    with pytest.raises(ServiceUnavailableError, match="outcome is unknown"):
        tries.failed(tries.pool(), channel, ChannelError("reset", sent=True))


def test_an_idempotent_call_whose_answer_was_lost_is_sent_again() -> None:
    tries = attempts(core.markers(TOPIC, [5]))
    step = tries.failed(tries.pool(), _Channel(("h", 1), True), ChannelError("reset", sent=True))
    assert isinstance(step, core.Pause)


def test_an_error_answer_is_raised_and_not_resent() -> None:
    tries = attempts(core.poll(TOPIC, None, True, None, None, 0))
    with pytest.raises(TopicNotFoundError):
        tries.answered(answer(encode_error("topic_not_found", "no t"), error=True))


def test_not_owner_goes_to_the_owner_at_once_then_gives_up_after_the_hops() -> None:
    owners = routes()
    tries = core.Attempts(core.publish(TOPIC, [b"x"]), owners, timeout_s=2, retries=0, backoff_s=0)
    moved = answer(encode_error("not_owner", "elsewhere", owner="tms://o:2"), error=True)
    assert tries.answered(moved) is core.AGAIN
    assert tries.pool() is not owners.default  # the owner's connections from now on
    hops = 1
    while True:
        try:
            step = tries.answered(moved)
        except NotOwnerError:
            break
        assert step is core.AGAIN
        hops += 1
    assert hops >= 2
