"""The queue routes over real HTTP, through the Python client (``tms.client.queue``):
what each answers, long-poll receive, bad input as JSON errors that change nothing,
access grants, and the worker helper."""

from __future__ import annotations

import threading
import time

import pytest

from tests.tms.http.conftest import Served
from tms.client import MessagingClient
from tms.client.queue import Queue, Worker
from tms.errors import ForbiddenError, TmsInvalidArgumentError, TopicNotFoundError
from tms.http.auth import Authorizer, Grant, Permission
from tms.model import TopicId
from tms.queues import AckOutcome, EnqueueItem, QueueMessage

Q = TopicId("default", "work")


def make_queue(served: Served, **props: str) -> Queue:
    client = MessagingClient(served.url, retries=0)
    client.create_topic(Q, {"kind": "queue", "lease_s": "30", **props})
    return client.queue(Q)


def test_enqueue_receive_ack_nack_stats(served: Served) -> None:
    queue = make_queue(served)
    ids = queue.enqueue([b"a", "b", EnqueueItem(b"c", key="k", priority=1)])
    assert [e.duplicate for e in ids] == [False, False, False]
    assert queue.enqueue([EnqueueItem(b"c2", key="k")])[0].id == ids[2].id
    got = queue.receive(10)
    assert [m.payload for m in got] == [b"a", b"b", b"c"]
    assert all(m.attempt == 1 and m.lease_expires_ms == served.clock.now_ms() + 30_000 for m in got)
    assert queue.ack([got[0], str(got[1].receipt)]) == [AckOutcome.ACKED, AckOutcome.ACKED]
    assert queue.nack([got[2]], delay_s=0) == [AckOutcome.RETURNED]
    [again] = queue.receive(10)
    assert again.payload == b"c" and again.attempt == 2
    stats = queue.stats()
    assert (stats.ready, stats.leased, stats.acked) == (0, 1, 2)
    report = queue.client.inspect(Q)
    assert {r["state"] for r in report["messages"]} == {"acked", "leased"}


def test_receive_waits_until_a_message_is_enqueued(served: Served) -> None:
    queue = make_queue(served)
    got: list[list[QueueMessage]] = []
    receiver = threading.Thread(target=lambda: got.append(queue.receive(5, wait_s=30)))
    receiver.start()
    time.sleep(0.2)  # let it wait (if it had not started waiting, it finds the message)
    queue.enqueue([b"wake up"])
    receiver.join(30)
    assert [m.payload for m in got[0]] == [b"wake up"]


def test_receive_wait_ends_empty_at_its_deadline(served: Served) -> None:
    queue = make_queue(served)
    assert queue.receive(1, wait_s=0.05) == []


@pytest.mark.parametrize(
    ("action", "body", "content_type", "status", "code"),
    [
        ("enqueue", b"{", "application/json", 400, "bad_encoding"),
        ("enqueue", b'{"messages": []}', "application/json", 400, "invalid_argument"),
        (
            "enqueue",
            b'{"messages": [{"payload": "!!"}]}',
            "application/json",
            400,
            "invalid_argument",
        ),
        (
            "enqueue",
            b'{"messages": [{"payload": "", "x": 1}]}',
            "application/json",
            400,
            "invalid_argument",
        ),
        (
            "enqueue",
            b'{"messages": [{"payload": "", "priority": -1}]}',
            "application/json",
            400,
            "invalid_argument",
        ),
        ("enqueue", b'{"messages": [{"payload": ""}]}', "avro/binary", 400, "invalid_argument"),
        ("receive", b'{"max": 0}', "application/json", 400, "invalid_argument"),
        ("receive", b'{"max": "3"}', "application/json", 400, "invalid_argument"),
        ("ack", b'{"receipts": ["nothex.1"]}', "application/json", 400, "invalid_argument"),
        ("ack", b'{"receipts": "x"}', "application/json", 400, "invalid_argument"),
        ("nack", b'{"receipts": []}', "application/json", 400, "invalid_argument"),
        ("settle", b'{"transactionWritePointer": 5}', "application/json", 400, "invalid_argument"),
    ],
)
def test_bad_input_is_a_json_error_and_changes_nothing(  # noqa: PLR0917
    served: Served, action: str, body: bytes, content_type: str, status: int, code: str
) -> None:
    queue = make_queue(served)
    response = served.http.post(
        f"{served.url}/v1/namespaces/default/topics/work/{action}",
        data=body,
        headers={"Content-Type": content_type},
    )
    assert response.status_code == status
    assert response.json()["error"] == code
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.pending) == (0, 0, 0)


def test_unknown_queue_and_plain_topic(served: Served) -> None:
    client = MessagingClient(served.url, retries=0)
    with pytest.raises(TopicNotFoundError):
        client.queue(TopicId("default", "nope")).enqueue([b"x"])
    client.create_topic(TopicId("default", "plain"))
    with pytest.raises(TmsInvalidArgumentError, match="not a queue"):
        client.queue(TopicId("default", "plain")).receive()
    make_queue(served)
    with pytest.raises(TmsInvalidArgumentError, match="is a queue"):
        client.poll(Q)


def served_with_a_worker(make_server: object) -> tuple[Served, MessagingClient]:
    """A service where ``adm`` may do anything and ``wrk`` only read the queue ``Q``;
    ``Q`` created, and the admin's client."""
    authorizer = Authorizer(
        {"adm": "admin", "wrk": "worker"},
        [
            Grant("admin", "*", "*", frozenset(Permission)),
            Grant("worker", "default", "work", frozenset({Permission.READ})),
        ],
    )
    served: Served = make_server(authorizer=authorizer)  # type: ignore[operator]
    admin = MessagingClient(served.url, token="adm", retries=0)
    admin.create_topic(Q, {"kind": "queue"})
    return served, admin


def test_grants_like_topics(make_server: object) -> None:
    served, admin = served_with_a_worker(make_server)
    admin.queue(Q).enqueue([b"job"])
    worker = MessagingClient(served.url, token="wrk", retries=0).queue(Q)
    with pytest.raises(ForbiddenError):
        worker.enqueue([b"not mine"])
    [m] = worker.receive()
    assert worker.ack([m]) == [AckOutcome.ACKED]


def test_settling_needs_write_access(make_server: object) -> None:
    # Given a transaction's pending enqueue, and a worker that may only read the queue
    served, admin = served_with_a_worker(make_server)
    wp = served.clock.now_ms() * 1_000_000
    admin.queue(Q).enqueue([b"pending"], tx_write_pointer=wp)
    worker = MessagingClient(served.url, token="wrk", retries=0).queue(Q)
    # When the worker settles it, either way: 403, and the enqueue stays pending
    for commit in (False, True):
        with pytest.raises(ForbiddenError):
            worker.settle(wp, commit=commit)
        assert admin.queue(Q).stats().pending == 1
    # Then a writer may
    assert admin.queue(Q).settle(wp, commit=False) == 1
    assert admin.queue(Q).stats().pending == 0


def test_worker_acks_what_succeeds_and_nacks_what_raises(served: Served) -> None:
    queue = make_queue(served, backoff_s="60")
    queue.enqueue([b"ok-1", b"fail", b"ok-2"])
    seen: list[bytes] = []

    def handle(message: QueueMessage) -> None:
        seen.append(message.payload)
        if message.payload == b"fail":
            raise RuntimeError("boom")

    worker = Worker(queue, handle, batch=10, wait_s=0)
    worker.run(until_empty=True)
    assert seen == [b"ok-1", b"fail", b"ok-2"]
    assert (worker.processed, worker.failed) == (2, 1)
    stats = queue.stats()
    assert (stats.acked, stats.scheduled, stats.leased) == (2, 1, 0)  # "fail" backs off
