"""A poll that carries a commit answers the commit once it is durable, whatever
happens to its read: a read that fails after the commit was written (fault injection in
the store), and a server stopping during the poll, still answer the committed version,
so the consumer's next request carries it and never meets ``bad_version``; the
``Subscriber``s (sync over both transports, asyncio) go on without a duplicate."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import requests

from tests.tms.helpers import tx
from tests.tms.rpc.conftest import Raw, Served, T, refused
from tms.aio import Subscriber as AsyncSubscriber
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.client.subscriber import Subscriber
from tms.client.subscriptions import SubscriptionBatch
from tms.errors import StorageUnavailableError
from tms.ids import MessageId
from tms.model import TopicId
from tms.rpc.frames import FLAG_ERROR, decode_body, rpc
from tms.subscription import SubscriptionId, after

SUB = SubscriptionId(T, "s")
PAYLOADS = [f"m{i}".encode() for i in range(10)]


@pytest.fixture(params=["rest", "binary"])
def client(request: pytest.FixtureRequest, served: Served) -> Iterator[MessagingClient]:
    url = served.http_url if request.param == "rest" else served.url
    client = MessagingClient(url, retries=0)
    client.publish(T, PAYLOADS)
    client.create_subscription(SUB)
    yield client
    client.close()


def test_a_read_failing_after_its_commit_answers_the_commit(
    client: MessagingClient, served: Served
) -> None:
    first = client.poll_subscription(SUB, limit=4)
    # Given a store whose next read of messages fails (after the commit is written)
    served.store.scan_faults.append(StorageUnavailableError("the disk is gone"))
    # When a poll commits the first batch's position riding on its read
    second = client.poll_subscription(
        SUB, start=first.position, limit=4, commit_version=first.version
    )
    # Then it answers the commit (no messages) and why the read failed
    assert isinstance(second.read_error, StorageUnavailableError)
    assert "the disk is gone" in str(second.read_error)
    assert second.messages == []
    assert (second.position, second.version) == (first.position, first.version + 1)
    stored = client.get_subscription(SUB)
    assert (stored.position, stored.version) == (first.position, first.version + 1)
    # ...and the next poll, committing with that version, is no bad_version
    third = client.poll_subscription(
        SUB, start=second.position, limit=4, commit_version=second.version
    )
    assert [m.payload for m in third.messages] == PAYLOADS[4:8]
    assert third.read_error is None and third.version == second.version + 1


def test_the_subscriber_goes_on_after_a_read_failing_after_its_commit(
    client: MessagingClient, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[bytes] = []
    pauses: list[float] = []
    with caplog.at_level(logging.WARNING, logger="tms.client.subscriber"):
        subscriber = Subscriber(
            client, SUB, batch=4, wait_ms=0, commit_interval_s=0, sleep=pauses.append
        )
        with subscriber:
            for message in subscriber:
                seen.append(message.payload)
                if message.payload == b"m3":  # the next poll commits and its read fails
                    served.store.scan_faults.append(StorageUnavailableError("gone"))
                if len(seen) == len(PAYLOADS):
                    break
    # Every message once, in order: the commit was answered, nothing read twice
    assert seen == PAYLOADS
    assert pauses  # it paused before reading again
    assert not [r for r in caplog.records if "changed" in r.getMessage()]  # no bad_version
    assert client.get_subscription(SUB).position == after(MessageId.from_bytes(_id(client, 8)))


def _id(client: MessagingClient, index: int) -> bytes:
    return client.poll(T, limit=index + 1).messages[index].id_bytes


def test_the_async_subscriber_goes_on_after_a_read_failing_after_its_commit(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    with MessagingClient(served.url, retries=0) as setup:
        setup.publish(T, PAYLOADS)
        setup.create_subscription(SUB)

    async def main() -> list[bytes]:
        seen: list[bytes] = []
        async with AsyncSubscriber(
            served.url, SUB, batch=4, wait_ms=0, commit_interval_s=0
        ) as subscriber:
            async for message in subscriber:
                seen.append(message.payload)
                if message.payload == b"m7":  # the next poll commits and its read fails
                    served.store.scan_faults.append(StorageUnavailableError("gone"))
                if len(seen) == len(PAYLOADS):
                    break
        return seen

    with caplog.at_level(logging.WARNING, logger="tms.aio.subscriber"):
        seen = asyncio.run(main())
    assert seen == PAYLOADS
    assert not served.store.scan_faults  # the fault was met
    assert not [r for r in caplog.records if "changed" in r.getMessage()]  # no bad_version


def _read_once(make_rpc: Any, limit: int) -> tuple[Served, SubscriptionBatch]:
    """A server with the messages published, the subscription made and read once."""
    served: Served = make_rpc()
    with MessagingClient(served.url, retries=0) as client:
        client.publish(T, PAYLOADS)
        client.create_subscription(SUB)
        return served, client.poll_subscription(SUB, limit=limit)


def test_a_server_stopping_during_a_poll_with_a_commit_answers_the_commit(
    make_rpc: Any,
) -> None:
    served, first = _read_once(make_rpc, 4)
    raw = Raw(served.address)
    stopping = threading.Thread(target=served.thread.stop)
    try:
        raw.hello()
        # Given a poll whose commit is being written on a disk that stalls
        served.store.gate.clear()
        request = rpc.SubPollRequest(
            ns=T.namespace,
            topic=T.topic,
            name=SUB.name,
            start=first.position.to_bytes(),
            limit=4,
            wait_ms=30_000,
            commit_version=first.version,
        )
        rid = raw.request(9, request)
        assert served.store.waiting.wait(10)
        # When the server stops meanwhile (it cancels the polls that wait)
        stopping.start()
        assert refused(served.address)
        served.store.gate.set()
        # Then the poll answers its commit (with its read), not an error
        frame = raw.frame()
        assert frame.request_id == rid and not frame.flags & FLAG_ERROR, frame
        answer = decode_body(rpc.SubPollResponse, frame.body)
        assert answer.version == first.version + 1
        assert answer.payloads == PAYLOADS[4:8]
    finally:
        served.store.gate.set()
        raw.close()
        if stopping.is_alive():
            stopping.join(60)
    stored = served.service.subscriptions.get(SUB, lag=False)
    assert (stored.position, stored.version) == (first.position, first.version + 1)


def test_a_server_stopping_during_a_long_poll_after_its_commit_answers_the_commit(
    make_rpc: Any,
) -> None:
    served, first = _read_once(make_rpc, 10)
    raw = Raw(served.address)
    try:
        raw.hello()
        # Given a poll that committed everything read and now waits for more
        request = rpc.SubPollRequest(
            ns=T.namespace,
            topic=T.topic,
            name=SUB.name,
            start=first.position.to_bytes(),
            wait_ms=30_000,
            commit_version=first.version,
        )
        rid = raw.request(9, request)
        for _ in range(1000):
            if served.service.subscriptions.get(SUB, lag=False).version > first.version:
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("the commit was not written")
        # When the server stops, Then the poll answers at once with the commit
        served.thread.stop()
        frame = raw.frame()
        assert frame.request_id == rid and not frame.flags & FLAG_ERROR, frame
        answer = decode_body(rpc.SubPollResponse, frame.body)
        assert (answer.version, answer.payloads) == (first.version + 1, [])
        assert answer.position == first.position.to_bytes()
    finally:
        raw.close()


@pytest.mark.parametrize("transport", ["rest", "binary"])
def test_the_subscriber_learns_that_a_commit_without_an_answer_was_written(
    transport: str, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    url = served.http_url if transport == "rest" else served.url
    client = MessagingClient(url, retries=0, timeout_s=1.0)
    client.publish(T, PAYLOADS)
    client.create_subscription(SUB)
    version = client.get_subscription(SUB).version

    def pause(_s: float) -> None:
        # the poll timed out: now its stalled commit lands
        served.store.gate.set()
        for _ in range(1000):
            if served.service.subscriptions.get(SUB, lag=False).version > version:
                return
            threading.Event().wait(0.01)

    seen: list[bytes] = []
    try:
        with caplog.at_level(logging.WARNING, logger="tms.client.subscriber"):
            subscriber = Subscriber(
                client, SUB, batch=4, wait_ms=0, commit_interval_s=0, sleep=pause
            )
            for message in subscriber:
                seen.append(message.payload)
                if message.payload == b"m3":  # the next poll's commit stalls past its timeout
                    served.store.gate.clear()
                if len(seen) == len(PAYLOADS):
                    break
    finally:
        served.store.gate.set()
        client.close()
    assert seen == PAYLOADS
    assert served.service.subscriptions.get(SUB, lag=False).version > version
    assert not [r for r in caplog.records if "changed" in r.getMessage()]  # no bad_version


def test_a_json_poll_says_its_read_failed_after_its_commit(served: Served) -> None:
    with MessagingClient(served.http_url, retries=0) as client:
        client.publish(T, PAYLOADS)
        client.create_subscription(SUB)
        first = client.poll_subscription(SUB, limit=4)
    served.store.scan_faults.append(StorageUnavailableError("the disk is gone"))
    path = f"/v1/namespaces/{T.namespace}/topics/{T.topic}/subscriptions/{SUB.name}/poll"
    r = requests.post(
        served.http_url + path,
        data=json.dumps({"startFrom": first.position.hex, "limit": 4}),
        headers={"Content-Type": "application/json"},
        params={"commit": str(first.version)},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["messages"] == [] and body["version"] == first.version + 1
    assert body["position"] == first.position.hex
    assert body["readError"] == {"error": "storage_unavailable", "message": "the disk is gone"}
    assert r.headers["X-Tms-Read-Error"] == "storage_unavailable"
    assert r.headers["X-Tms-Read-Error-Message"] == "the disk is gone"


def test_the_publishers_word_does_not_hold_up_its_committing_thread(served: Served) -> None:
    words: list[tuple[TopicId, list[int]]] = []
    answer = threading.Event()

    def stalled(topic: TopicId, wps: Sequence[int]) -> None:
        # Fault injection: the service takes its time over the word (its answer waits)
        answer.wait(30)
        words.append((topic, list(wps)))

    served.service.add_finish_listener(stalled)
    wp = served.clock.now_ms() * 1_000_000
    with MessagingClient(served.http_url, retries=0) as client:
        publisher = TransactionalPublisher(client)
        publisher.start_tx(tx(wp - 10, wp))
        publisher.publish(T, [b"one"])
        assert publisher.commit_tx()
        # When the transaction has committed and the publisher's last step runs
        step = threading.Thread(target=publisher.post_tx_commit)
        step.start()
        step.join(10)
        # Then it returns without waiting for the service's answer to its word...
        returned = not step.is_alive()
        answer.set()
        step.join(30)
        assert returned
        # ...and the word arrives
        for _ in range(1000):
            if words:
                break
            threading.Event().wait(0.01)
    assert words == [(T, [wp])]
