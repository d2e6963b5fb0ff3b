"""Garbage on the binary protocol: random bytes, random frames and mutated requests, with
and without a hello. Each connection gets answers or is closed; the server never stops
serving and no other connection notices."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tms.rpc.conftest import Raw
from tms.config import TmsConfig
from tms.http.server import HttpServerThread
from tms.model import TopicId
from tms.rpc.config import RpcConfig
from tms.rpc.frames import Kind, encode_body, encode_frame, rpc
from tms.rpc.ops import OPS
from tms.rpc.server import RpcServer
from tms.service import MessagingService
from tms.store.leveldb import LevelDBStore
from tms.subscription import Preferences, SubscriptionId

T = TopicId("ns", "t")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RpcServer, MessagingService]]:
    path: Path = tmp_path_factory.mktemp("fuzz")
    service = MessagingService(LevelDBStore(path / "db"), TmsConfig(tx_max_lifetime_s=10**10))
    service.create_topic(T)
    service.subscriptions.create(SubscriptionId(T, "s"), Preferences())
    config = RpcConfig(port=0, max_frame_bytes=1 << 16, frame_timeout_s=0.5)
    rpc_server = RpcServer(service, config)
    thread = HttpServerThread(rpc_server)
    thread.start()
    yield rpc_server, service
    thread.stop()
    service.close()


def _exchange(address: tuple[str, int], data: bytes, hello: bool) -> None:
    """Send ``data`` and read whatever comes back, until the server closes or goes quiet."""
    raw = Raw(address, timeout_s=0.3)
    try:
        if hello:
            raw.hello()
        with contextlib.suppress(OSError):
            raw.send(data)
        with contextlib.suppress(OSError, EOFError):
            while True:
                raw.frame()
    finally:
        raw.close()


def _still_serving(address: tuple[str, int]) -> None:
    raw = Raw(address)
    try:
        raw.hello()
        raw.request(5, rpc.PollRequest(ns="ns", topic="t", limit=1))
        assert raw.frame().kind == Kind.RESPONSE
    finally:
        raw.close()


def _mutated_requests() -> st.SearchStrategy[bytes]:
    """Well-framed requests of every operation whose bodies are cut, flipped or random."""
    bodies = [encode_body(op.request()) for op in OPS] + [
        encode_body(rpc.PublishRequest(ns="ns", topic="t", payloads=[b"x"])),
        encode_body(rpc.PollRequest(ns="ns", topic="t", wait_ms=1)),
        encode_body(rpc.SubPollRequest(ns="ns", topic="t", name="s", wait_ms=1)),
        encode_body(
            rpc.SubCommitRequest(ns="ns", topic="t", name="s", position=bytes(20), version=1)
        ),
    ]

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        body = bytearray(draw(st.sampled_from(bodies)))
        for _ in range(draw(st.integers(0, 4))):
            if body:
                body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
        body = body[: draw(st.integers(0, len(body)))] + draw(st.binary(max_size=16))
        op = draw(st.sampled_from([op.code for op in OPS] + [200, 255]))
        return encode_frame(Kind.REQUEST, op, draw(st.integers(0, 2**32 - 1)), bytes(body))

    return build()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.one_of(
        st.binary(min_size=1, max_size=200),
        _mutated_requests(),
        st.lists(_mutated_requests(), min_size=2, max_size=5).map(b"".join),
        st.builds(
            lambda n, rest: struct.pack(">I", n) + rest,
            st.integers(0, 2**32 - 1),
            st.binary(max_size=40),
        ),
    ),
    hello=st.booleans(),
)
def test_garbage_never_harms_the_server_or_another_connection(
    server: tuple[RpcServer, MessagingService], data: bytes, hello: bool
) -> None:
    rpc_server, service = server
    bystander = Raw(rpc_server.address)
    try:
        bystander.hello()
        _exchange(rpc_server.address, data, hello)
        bystander.send(encode_frame(Kind.PING, 0, 1))
        assert bystander.frame().kind == Kind.PONG
    finally:
        bystander.close()
    _still_serving(rpc_server.address)
    service.fetch(T)  # the store reads as before
