"""A queue's receive and ack over the binary protocol (ops 7 and 8): the same messages,
receipts and outcomes as over REST, through ``MessagingClient("tms://...")``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tms.rpc.conftest import Raw, Served
from tms.client import MessagingClient
from tms.client.rpc import RpcMessagingClient
from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId
from tms.queues import AckOutcome, EnqueueItem
from tms.rpc.frames import rpc
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
