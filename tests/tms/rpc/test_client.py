"""``MessagingClient("tms://...")``: the same answers as over REST, pipelining on shared
connections, what is retried and what is not, reconnecting and shielding."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from tests.tms.rpc.conftest import Served, T
from tms.client import MessagingClient
from tms.client.channel import ChannelError, may_retry
from tms.client.rpc import RpcMessagingClient, rest_url
from tms.errors import (
    RequestTimeoutError,
    ServiceUnavailableError,
    StorageUnavailableError,
    TmsInvalidArgumentError,
    TopicNotFoundError,
)
from tms.ids import MessageId
from tms.model import TopicId
from tms.rpc.config import RpcConfig
from tms.rpc.frames import rpc
from txn.transaction import Transaction, TransactionType

WP = 1_700_000_000_000 * 1_000_000  # a write pointer of the fake clock's time


def reader_tx(*, in_progress: tuple[int, ...] = ()) -> Transaction:
    """A read transaction that sees every pointer below WP + 10 but ``in_progress``."""
    return Transaction(
        transaction_id=WP + 20,
        read_pointer=WP + 10,
        in_progress=in_progress,
        first_short_in_progress=min(in_progress, default=2**63 - 1),
        type=TransactionType.SHORT,
        write_pointer=WP + 20,
    )


def scenario(client: MessagingClient, topic: TopicId) -> list[Any]:
    """Every method, in an order whose answers do not depend on the transport."""
    out: list[Any] = []
    client.create_topic(topic, {"ttl": "3600"})
    out.append(client.get_topic(topic))
    out.append(client.publish(topic, [b"a", "b"]))
    token = client.publish(topic, [b"tx"], tx_write_pointer=WP + 1)
    assert token is not None
    out.append(token.detail)
    client.rollback(topic, token)
    client.store(topic, [b"s1", b"s2"], tx_write_pointer=WP + 2, ttls=[None, 60])
    marker = client.publish(topic, [], tx_write_pointer=WP + 2)
    assert marker is not None
    out.append(marker.detail)
    markers = client.publish_markers(topic, [WP + 3, WP + 4], idempotency_key="k")
    again = client.publish_markers(topic, [WP + 3, WP + 4], idempotency_key="k")
    out.append(([t.detail for t in markers.tokens], markers.duplicate, again.duplicate))
    client.publish(topic, [b"ttl"], ttls=[30])
    everything = client.poll(topic)
    out.append([(m.id_bytes, m.payload) for m in everything.messages])
    second = everything.messages[1]
    out.append(client.poll(topic, start=second.id, inclusive=False, limit=2).messages)
    out.append(client.poll(topic, start=second.id_hex).messages[0])
    out.append(client.poll(topic, start=second.publish_ms, limit=1).messages)
    held = client.poll(topic, transaction=reader_tx(in_progress=(WP + 3,)))
    out.append((held.messages, held.held))
    out.append(client.bounds(topic, transaction=reader_tx(in_progress=(WP + 3,))))
    out.append(client.bounds(topic, start=MessageId(second.publish_ms, 1), inclusive=False))
    limited = client.bounds(topic, limit=2)  # counts what a read of two would return
    assert (limited.counted, limited.after_limit is not None) == (2, True)
    with pytest.raises(TopicNotFoundError):
        client.poll(TopicId(topic.namespace, "missing"))
    with pytest.raises(TmsInvalidArgumentError):
        client.publish(topic, [])
    out.append(client.list_topics(topic.namespace))
    return out


def test_the_binary_protocol_answers_as_the_rest_api_does(served: Served) -> None:
    with MessagingClient(served.http_url) as http, MessagingClient(served.url) as binary:
        assert isinstance(binary, RpcMessagingClient) and isinstance(binary, MessagingClient)
        over_http = scenario(http, TopicId("ns", "http"))
        over_rpc = scenario(binary, TopicId("ns", "rpc"))
    assert len(over_http) == len(over_rpc)
    for a, b in zip(over_http, over_rpc, strict=True):
        if isinstance(a, list) and a and isinstance(a[0], tuple):
            assert [p for _, p in a] == [p for _, p in b]  # ids differ: other topic
        elif a != b:
            # ids and times differ between the topics; the shapes and payloads do not
            assert type(a) is type(b) and repr(a).count("payload") == repr(b).count("payload")
    payloads = [p for _, p in over_rpc[5]]
    assert payloads == [b"a", b"b", b"tx", b"s1", b"s2", b"ttl"]  # rolled back is read too
    assert over_rpc[9][1] is True  # held at the uncommitted marker


def test_tokens_cross_transports(served: Served) -> None:
    with MessagingClient(served.http_url) as http, MessagingClient(served.url) as binary:
        token = binary.publish(T, [b"x"], tx_write_pointer=WP + 5)
        assert token is not None
        http.rollback(T, token)  # the same opaque bytes REST hands out
        read = binary.poll(T, transaction=reader_tx())
        assert read.messages == []


def test_follow_over_the_binary_protocol(served: Served) -> None:
    with MessagingClient(served.url) as client:
        client.publish(T, [b"1", b"2"])
        got: list[bytes] = []

        def later() -> None:
            time.sleep(0.2)
            client.publish(T, [b"3"])

        publisher = threading.Thread(target=later)
        publisher.start()
        for message in client.follow(T, start=0, wait_ms=5000, stop=lambda: len(got) >= 3):
            got.append(message.payload)
        # the message can be read before its publisher has its answer: wait for it before
        # the client closes, or the close cuts the answer off
        publisher.join(30)
        assert got == [b"1", b"2", b"3"]


def test_threads_pipeline_on_one_connection(served: Served) -> None:
    client = MessagingClient(served.url, connections=1)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                client.publish(T, [f"{n}-{i}".encode()])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors
        assert len(served.server.connections) == 1
        payloads = [m.payload.decode() for m in client.poll(T).messages]
        assert len(payloads) == 800
        for n in range(16):  # each thread's messages in its order
            mine = [p for p in payloads if p.startswith(f"{n}-")]
            assert mine == [f"{n}-{i}" for i in range(50)]
    finally:
        client.close()


def test_a_publish_whose_answer_is_lost_is_not_sent_again(served: Served) -> None:
    sleeps: list[float] = []
    with MessagingClient(served.url, timeout_s=0.5, sleep=sleeps.append) as client:
        # Given a disk that stalls past the client's timeout
        served.store.gate.clear()
        with pytest.raises(ServiceUnavailableError, match="outcome is unknown"):
            client.publish(T, [b"once"])
        assert sleeps == []  # not sent again
        served.store.gate.set()
        # Then the server writes it, once
        deadline = time.monotonic() + 10
        while not served.service.fetch(T).messages and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        assert [m.payload for m in client.poll(T).messages] == [b"once"]


def test_a_poll_whose_answer_is_late_is_sent_again(make_rpc: Any) -> None:
    served: Served = make_rpc(RpcConfig(port=0, worker_threads=1))
    sleeps: list[float] = []
    with (
        MessagingClient(served.url) as writer,
        MessagingClient(served.url, timeout_s=1.0, sleep=sleeps.append) as reader,
    ):
        # Given the only worker thread held by a read of a stalled disk
        writer.publish(T, [b"x"])
        served.store.read_gate.clear()
        stalled = threading.Thread(target=writer.poll, args=(T,))
        stalled.start()
        assert served.store.reading.wait(10)
        threading.Timer(1.3, served.store.read_gate.set).start()
        # When a poll gets no answer within its timeout, it is sent again, and answered
        assert [m.payload for m in reader.poll(T).messages] == [b"x"]
        assert sleeps == [0.1]
        stalled.join(10)


def test_an_idle_connection_closed_by_the_server_is_replaced_unnoticed(make_rpc: Any) -> None:
    served: Served = make_rpc(RpcConfig(port=0, idle_timeout_s=0.3))
    with MessagingClient(served.url, retries=0) as client:
        client.publish(T, [b"1"])
        time.sleep(0.8)  # the server said GOAWAY and closed
        client.publish(T, [b"2"])  # not retried, yet it succeeds: a new connection
        assert [m.payload for m in client.poll(T).messages] == [b"1", b"2"]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_failing_address_is_left_for_the_next(served: Served) -> None:
    dead = f"127.0.0.1:{_dead_port()}"
    live = served.url.removeprefix("tms://")
    sleeps: list[float] = []
    with MessagingClient(f"tms://{dead},{live}", sleep=sleeps.append) as client:
        client.publish(T, [b"x"])  # nothing was sent to the dead one: a publish may go on
        assert sleeps == [0.1]
        client.publish(T, [b"y"])
        assert sleeps == [0.1]  # the live one is kept


def test_an_address_that_keeps_failing_is_shielded_and_fails_fast() -> None:
    sleeps: list[float] = []
    url = f"tms://127.0.0.1:{_dead_port()}"
    client = MessagingClient(url, retries=3, sleep=sleeps.append, shield_after=2, shield_s=10)
    assert isinstance(client, RpcMessagingClient)
    try:
        with pytest.raises(ServiceUnavailableError, match="shielded"):
            client.poll(T)
        assert sleeps == [0.1, 0.4, 1.6]  # back-off between attempts
        started = time.monotonic()
        with pytest.raises(ServiceUnavailableError, match="shielded"):
            client.publish(T, [b"x"])
        assert time.monotonic() - started < 0.5
        assert client.endpoints.shielded(client.endpoints.addresses[0])
    finally:
        client.close()


def test_what_may_be_sent_again() -> None:
    unsent, lost = ChannelError("x", sent=False), ChannelError("x", sent=True)
    assert may_retry(unsent, False) and may_retry(lost, True) and not may_retry(lost, False)
    dropped = RequestTimeoutError("dropped")
    assert may_retry(dropped, False)  # the server did nothing with it
    assert not may_retry(StorageUnavailableError("disk"), False)
    assert may_retry(StorageUnavailableError("disk"), True)
    assert not may_retry(TopicNotFoundError(T), True)


def test_the_rest_url_comes_from_the_hello() -> None:
    welcome = rpc.Welcome(http_port=8443, http_tls=True)
    assert rest_url("tms://x", ("::1", 1), welcome) == "https://[::1]:8443"
    assert rest_url("tms://x", ("h", 1), rpc.Welcome(http_port=80)) == "http://h:80"
    with pytest.raises(Exception, match="http_url"):
        rest_url("tms://x", ("h", 1), rpc.Welcome(http_port=0))
