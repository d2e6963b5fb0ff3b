"""A subscription's poll and commits over the binary protocol answer as over REST: the
same messages, positions and versions, the same errors, on one server (both clients
against the same service); an answer cut by the frame size ends at the position after
its last message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.tms.rpc.conftest import Served, T
from tms.client import MessagingClient
from tms.client.rpc import RpcMessagingClient
from tms.errors import (
    BadVersionError,
    PositionOutOfRangeError,
    SubscriptionNotFoundError,
    TmsInvalidArgumentError,
)
from tms.ids import MessageId
from tms.rpc.config import RpcConfig
from tms.subscription import Preferences, SubscriptionId

A, B = SubscriptionId(T, "a"), SubscriptionId(T, "b")


@pytest.fixture
def clients(served: Served) -> Iterator[tuple[MessagingClient, MessagingClient]]:
    rest = MessagingClient(served.http_url, retries=0)
    binary = MessagingClient(served.url, retries=0)
    assert isinstance(binary, RpcMessagingClient)
    yield rest, binary
    binary.close()
    rest.close()


def _same(rest: Any, binary: Any) -> None:
    assert rest == binary


def test_poll_and_commit_answer_the_same_over_both(
    clients: tuple[MessagingClient, MessagingClient],
) -> None:
    rest, binary = clients
    rest.publish(T, [f"m{i}" for i in range(10)])
    rest.create_subscription(A)
    rest.create_subscription(B)
    # The same reads: from the position, from a start, with a commit riding on it
    for sub, client in ((A, rest), (B, binary)):
        first = client.poll_subscription(sub, limit=4)
        assert [m.payload for m in first.messages] == [b"m0", b"m1", b"m2", b"m3"]
    a1, b1 = rest.poll_subscription(A, limit=4), binary.poll_subscription(B, limit=4)
    _same(a1, b1)
    a2 = rest.poll_subscription(A, start=a1.position, limit=3, commit_version=a1.version)
    b2 = binary.poll_subscription(B, start=b1.position, limit=3, commit_version=b1.version)
    _same(a2, b2)
    assert a2.start == a1.position and a2.version == a1.version + 1
    # The same commit answers (but the time it was written)
    ia = rest.commit_subscription(A, a2.position, a2.version)
    ib = binary.commit_subscription(B, b2.position, b2.version)
    assert ib.id == B and ia.position == ib.position == a2.position
    assert (ia.version, ia.committed_by, ia.generation, ia.preferences, ia.lag) == (
        ib.version,
        ib.committed_by,
        ib.generation,
        ib.preferences,
        ib.lag,
    )
    # And what one transport committed, the other reads
    assert rest.get_subscription(B).position == ib.position
    assert [m.payload for m in binary.poll_subscription(A).messages] == [b"m7", b"m8", b"m9"]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c, p, v: c.commit_subscription(A, p, v + 5), BadVersionError),
        (lambda c, p, v: c.poll_subscription(A, start=p, commit_version=v - 1), BadVersionError),
        (lambda c, p, v: c.commit_subscription(B, p, 1), SubscriptionNotFoundError),
        (lambda c, p, v: c.poll_subscription(B), SubscriptionNotFoundError),
        (
            lambda c, p, v: c.commit_subscription(A, MessageId(1, 0), v),
            PositionOutOfRangeError,
        ),
        (lambda c, p, v: c.poll_subscription(A, limit=10_001), TmsInvalidArgumentError),
    ],
)
def test_the_same_errors_over_both_and_nothing_changes(
    clients: tuple[MessagingClient, MessagingClient], call: Any, error: type[Exception]
) -> None:
    rest, binary = clients
    rest.publish(T, [b"x", b"y"])
    rest.create_subscription(A)
    batch = rest.poll_subscription(A)
    rest.commit_subscription(A, batch.position, batch.version)
    before = rest.get_subscription(A)
    errors = []
    for client in (rest, binary):
        with pytest.raises(error) as caught:
            call(client, before.position, before.version)
        errors.append(caught.value)
    assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1])
    assert rest.get_subscription(A) == before


def test_a_transactional_subscription_needs_a_transaction_over_both(
    clients: tuple[MessagingClient, MessagingClient],
) -> None:
    rest = clients[0]
    rest.create_subscription(A, Preferences(transactional=True))
    for client in clients:
        with pytest.raises(TmsInvalidArgumentError, match="transactional"):
            client.poll_subscription(A)


def test_an_answer_cut_by_the_frame_size_ends_after_its_last_message(make_rpc: Any) -> None:
    served = make_rpc(RpcConfig(port=0, max_frame_bytes=8192))  # answers of ~4 KiB
    client = MessagingClient(served.url)
    try:
        for i in range(10):
            client.publish(T, [bytes([i]) * 1000])
        client.create_subscription(A)
        got: list[bytes] = []
        batch = client.poll_subscription(A, limit=10)
        while batch.messages:
            assert len(batch.messages) < 10
            got += [m.payload for m in batch.messages]
            batch = client.poll_subscription(A, start=batch.position, commit_version=batch.version)
        assert got == [bytes([i]) * 1000 for i in range(10)]  # none lost, none twice
    finally:
        client.close()
