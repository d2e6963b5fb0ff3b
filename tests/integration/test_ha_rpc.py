"""The binary protocol (``tms://``) against two ``tms serve`` cluster instances
(``tests/engines.py``): a client of either instance reaches each topic's owner (the
``not_owner`` answer names its binary address), ``tms.aio`` too, and a stream of
publishes goes on through an owner killed with -9."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import requests

from tests.integration.test_ha_tms import TmsCluster, cluster  # noqa: F401 - the fixture
from tms.aio import AsyncMessagingClient
from tms.client import MessagingClient
from tms.errors import TmsError
from tms.model import TopicId

T = TopicId("ns", "orders")


def test_a_client_of_any_instance_reaches_the_owner(cluster: TmsCluster) -> None:  # noqa: F811
    # Given a owning the topic, and clients that know only b's binary address
    _a, url_a, rpc_a = cluster.serve_rpc("a")
    _b, url_b, rpc_b = cluster.serve_rpc("b")
    with MessagingClient(url_a) as admin:
        admin.create_topic(T)
    described = requests.get(f"{url_b}/v1/cluster", timeout=30).json()
    assert {i["id"]: i.get("rpc") for i in described["instances"]} == {"a": rpc_a, "b": rpc_b}
    # When they publish through b
    with MessagingClient(rpc_b) as client:
        client.publish(T, [b"sync"])
        # Then the publish went to a, and reads are served by b
        assert [m.payload for m in client.poll(T).messages] == [b"sync"]

    async def publish_async() -> list[bytes]:
        async with AsyncMessagingClient(rpc_b) as aio:
            await aio.publish(T, [b"aio-1"])
            await asyncio.gather(*(aio.publish_nowait(T, [b"aio-%d" % n]) for n in (2, 3)))
            return [m.payload for m in (await aio.poll(T)).messages]

    assert asyncio.run(publish_async()) == [b"sync", b"aio-1", b"aio-2", b"aio-3"]
    assert requests.get(f"{url_a}/v1/cluster", timeout=30).json()["owners"] == {"ns.orders": "a"}


def test_publishes_go_on_through_an_owner_killed_mid_stream(
    cluster: TmsCluster,  # noqa: F811
) -> None:
    # Given a owning the topic and a publisher streaming through the binary protocol
    a, url_a, _rpc_a = cluster.serve_rpc("a")
    _b, url_b, rpc_b = cluster.serve_rpc("b")
    with MessagingClient(url_a) as admin:
        admin.create_topic(T)
    acked: list[tuple[bytes, float]] = []
    failed: list[bytes] = []
    stop = threading.Event()

    def publisher() -> None:
        # b's address only: until the kill every publish is sent on to a
        with MessagingClient(rpc_b, timeout_s=10, retries=6, backoff_s=0.05) as client:
            n = 0
            while not stop.is_set():
                payload = b"m%d" % n
                n += 1
                try:
                    client.publish(T, [payload])
                    acked.append((payload, time.monotonic()))
                except TmsError:
                    failed.append(payload)
                    time.sleep(0.05)

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(acked) < 20:
            assert time.monotonic() < deadline, "no publish acknowledged"
            time.sleep(0.05)
        # When a is killed -9 mid-stream
        a.kill()
        killed = time.monotonic()
        # Then b takes the topic over and the stream goes on through it
        deadline = time.monotonic() + 60
        while not any(at > killed for _p, at in acked[-20:]) or len(acked) < 40:
            assert time.monotonic() < deadline, "no publish acknowledged after the kill"
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(60)
    with MessagingClient(url_b) as reader:
        stored = [m.payload for m in reader.poll(T, limit=100_000).messages]
    counts = Counter(stored)
    assert all(n == 1 for n in counts.values()), "a message stored twice"
    assert {p for p, _at in acked} <= set(counts), "an acknowledged message is missing"
    assert set(counts) <= {p for p, _at in acked} | set(failed)
    assert requests.get(f"{url_b}/v1/cluster", timeout=30).json()["owners"] == {"ns.orders": "b"}
