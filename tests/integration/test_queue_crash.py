"""``tms serve`` killed with SIGKILL under queue load (producers enqueueing, consumers
receiving and acking over HTTP), then restarted: no enqueued message is lost, no acked
message comes back, and the leases that were in flight expire and redeliver."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

from tests.integration.procs import TmsServeProcess
from tms.client import MessagingClient
from tms.errors import TmsError
from tms.model import TopicId
from tms.queues import AckOutcome, EnqueueItem

Q = TopicId("ns", "crashq")


def produce(url: str, enqueued: dict[str, bytes], stop: threading.Event, name: str) -> None:
    queue = MessagingClient(url, retries=0).queue(Q)
    i = 0
    try:
        while not stop.is_set():
            keys = [f"{name}-{i + j}" for j in range(20)]
            i += 20
            results = queue.enqueue(EnqueueItem(k.encode(), key=k) for k in keys)
            enqueued.update(zip(keys, (r.id for r in results), strict=True))
    except TmsError:
        pass  # the server died
    finally:
        queue.client.close()


def consume(
    url: str, acked: set[bytes], sent: set[bytes], leased: set[bytes], stop: threading.Event
) -> None:
    """``sent``: acks sent (an answer the crash cut off may have landed), ``acked``: acks
    answered."""
    queue = MessagingClient(url, retries=0).queue(Q)
    try:
        while not stop.is_set():
            messages = queue.receive(50, wait_s=0.2)
            leased.update(m.id for m in messages)
            keep = messages[: len(messages) // 2]  # the rest stay leased (in flight)
            sent.update(m.id for m in keep)
            for m, outcome in zip(keep, queue.ack(keep), strict=True):
                assert outcome is AckOutcome.ACKED
                acked.add(m.id)
    except TmsError:
        pass
    finally:
        queue.client.close()


def test_kill_9_under_queue_load_and_restart(tmp_path: Path) -> None:
    serve = TmsServeProcess(tmp_path / "data")
    rng = random.Random(5)
    enqueued: dict[str, bytes] = {}
    acked: set[bytes] = set()
    sent: set[bytes] = set()
    leased: set[bytes] = set()
    try:
        url = serve.start()
        with MessagingClient(url) as client:
            client.create_topic(Q, {"kind": "queue", "lease_s": "1", "backoff_s": "0"})
        stop = threading.Event()
        threads = [
            threading.Thread(target=produce, args=(url, enqueued, stop, f"p{n}")) for n in range(2)
        ] + [
            threading.Thread(target=consume, args=(url, acked, sent, leased, stop))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(1.0, 2.0))
        serve.stop(signal.SIGKILL)
        stop.set()
        for t in threads:
            t.join(10)
        assert enqueued and acked, "the load made progress"
        in_flight = leased - sent

        # Given the restarted service
        url = serve.start()
        client = MessagingClient(url)
        queue = client.queue(Q)
        # Then every acknowledged enqueue is there (a repeat is a duplicate of the same id)
        keys = list(enqueued)
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            again = queue.enqueue(EnqueueItem(b"again", key=k) for k in chunk)
            assert all(r.duplicate for r in again)
            assert [r.id for r in again] == [enqueued[k] for k in chunk]
        # and draining it gives every unacked message once more, the in-flight leases
        # after they expired, and never an acked one
        drained: dict[bytes, int] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            messages = queue.receive(500, wait_s=1.5)
            if not messages and queue.stats().leased == 0 and queue.stats().ready == 0:
                break
            assert not acked & {m.id for m in messages}, "an acked message came back"
            queue.ack(messages)
            drained.update((m.id, m.attempt) for m in messages)
        stats = queue.stats()
        assert (stats.ready, stats.leased, stats.scheduled) == (0, 0, 0)
        ids = set(enqueued.values())
        assert ids - sent <= set(drained), "an enqueued message was lost"
        assert in_flight & ids, "some leases were in flight at the kill"
        assert all(drained[i] >= 2 for i in in_flight & set(drained))
        client.close()
        assert serve.stop(signal.SIGTERM) == 0
    finally:
        serve.kill_if_running()
