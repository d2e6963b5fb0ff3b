"""Competing consumers for real: ``txn serve`` and ``tms serve`` as processes, a producer
enqueueing ``TXMS_QUEUE_TEST_MESSAGES`` messages (50,000 by default; set it higher for a
bigger run) while 8 worker processes (``queue_worker_proc``) receive and ack them over
HTTP — some acks inside transactions that commit, some inside ones that abort — and
workers are killed with SIGKILL in the middle of their leases and replaced.

In the end every message is acked, exactly once, and the deliveries the workers logged
(with the times the *service* recorded: due time and lease expiry, on its clock) show
that no message was held by two live leases, none was delivered before it was due, and
redeliveries after an expired lease came after the queue's back-off."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.procs import ProcessStack
from tms.client import MessagingClient
from tms.model import TopicId
from tms.queues import EnqueueItem

Q = TopicId("work", "jobs")
LEASE_MS = 2_000
BACKOFF_MS, MAX_BACKOFF_MS, JITTER = 1_000, 4_000, 0.2
WORKERS = 8


def messages_to_run() -> int:
    return int(os.environ.get("TXMS_QUEUE_TEST_MESSAGES", "50000"))


@dataclass
class Delivery:
    attempt: int
    due_ms: int
    lease_expires_ms: int
    ack: str = ""  # "", "acked", "lease_lost", ... (plain), "commit" or "abort" (in a tx)

    @property
    def received_ms(self) -> int:
        return self.lease_expires_ms - LEASE_MS


@dataclass
class History:
    deliveries: dict[int, Delivery] = field(default_factory=dict)


def backoff(attempt: int) -> int:
    return min(MAX_BACKOFF_MS, BACKOFF_MS * 2 ** (attempt - 1))


def start_worker(stack: ProcessStack, log: Path, seed: int) -> subprocess.Popen[bytes]:
    assert stack.txn.address is not None
    host, port = stack.txn.address
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.queue_worker_proc", stack.url,
         f"{host}:{port}", Q.namespace, Q.topic, str(log), str(seed), str(LEASE_MS)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def read_logs(paths: list[Path]) -> dict[str, History]:
    histories: dict[str, History] = {}
    for path in paths:
        if not path.exists():
            continue  # killed before it received anything
        for line in path.read_text().splitlines():
            parts = line.split()
            if not parts or (parts[0] == "R" and len(parts) != 5):
                continue  # the line a kill -9 cut short
            history = histories.setdefault(parts[1], History())
            attempt = int(parts[2])
            if parts[0] == "R":
                history.deliveries[attempt] = Delivery(attempt, int(parts[3]), int(parts[4]))
            elif parts[0] in ("A", "C", "X") and attempt in history.deliveries:
                outcome = {"C": "commit", "X": "abort"}.get(parts[0]) or parts[3]
                history.deliveries[attempt].ack = outcome
    return histories


def test_competing_workers_killed_mid_lease(tmp_path: Path) -> None:
    total = messages_to_run()
    rng = random.Random(19)
    with ProcessStack(tmp_path) as stack:
        client = MessagingClient(stack.url, retries=3, backoff_s=0.05)
        client.create_topic(
            Q,
            {
                "kind": "queue",
                "max_attempts": "0",
                "backoff_s": str(BACKOFF_MS // 1000),
                "max_backoff_s": str(MAX_BACKOFF_MS // 1000),
                "jitter_percent": str(int(JITTER * 100)),
            },
        )
        queue = client.queue(Q)

        def produce() -> None:
            # Keyed: a retried enqueue after a lost answer is a duplicate, not a second copy.
            for start in range(0, total, 1_000):
                queue.enqueue(
                    EnqueueItem(b"job %d" % i, key=f"job-{i}")
                    for i in range(start, min(total, start + 1_000))
                )

        producer = threading.Thread(target=produce)
        producer.start()
        logs: list[Path] = []
        workers: list[subprocess.Popen[bytes]] = []

        def spawn() -> None:
            logs.append(tmp_path / f"worker{len(logs)}.log")
            workers.append(start_worker(stack, logs[-1], len(logs)))

        def mid_lease() -> list[int]:
            """Workers alive whose log ends with a batch received and not yet acked."""
            found = []
            for i, w in enumerate(workers):
                if w.poll() is None and logs[i].exists():
                    with logs[i].open("rb") as f:
                        f.seek(max(0, logs[i].stat().st_size - 200))
                        tail = f.read().splitlines()
                    if tail and tail[-1].startswith(b"R "):
                        found.append(i)
            return found

        def victim() -> subprocess.Popen[bytes] | None:
            """A worker caught holding its leases (looked for for up to 2 s): stopped first,
            then its log read again, so that it cannot ack between the look and the kill."""
            until = time.monotonic() + 2
            while time.monotonic() < until:
                holding = mid_lease()
                if holding:
                    i = rng.choice(holding)
                    workers[i].send_signal(signal.SIGSTOP)
                    if i in mid_lease():
                        return workers[i]
                    workers[i].send_signal(signal.SIGCONT)
                time.sleep(0.005)
            return None

        for _ in range(WORKERS):
            spawn()
        kills = 0
        deadline = time.monotonic() + 600
        try:
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(0.5, 1.5))
                target = victim() if kills < 6 else None
                if target is not None:  # kill -9 a worker in the middle of its leases
                    target.send_signal(signal.SIGKILL)
                    target.wait(10)
                    kills += 1
                    spawn()
                stats = queue.stats()
                if not producer.is_alive() and stats.acked == total:
                    break
            producer.join(60)
            stats = queue.stats()
        finally:
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGKILL)
                    w.wait(10)
        assert kills == 6
        # Then: every message acked, nothing left anywhere
        assert (stats.acked, stats.ready, stats.leased, stats.scheduled, stats.pending) == (
            total, 0, 0, 0, 0,
        )  # fmt: skip
        report = client.inspect(Q, limit=100_000) if total <= 100_000 else None
        client.close()
    if report is not None:
        assert len(report["messages"]) == total
        assert {m["state"] for m in report["messages"]} == {"acked"}
    check_histories(read_logs(logs), total)


def check_histories(histories: dict[str, History], total: int) -> None:
    assert len(histories) == total, "every message was delivered"
    redelivered_after_expiry = aborted = 0
    for message_id, history in histories.items():
        attempts = sorted(history.deliveries)
        effective = [a for a in attempts if history.deliveries[a].ack in ("acked", "commit")]
        # Exactly one ack took effect (the worker that made it may have died before
        # logging it: then none is logged), and nothing was delivered after it.
        assert len(effective) <= 1, (message_id, history)
        if effective:
            assert effective[0] == attempts[-1], (message_id, history)
        for earlier, later in itertools.pairwise(attempts):
            d0, d1 = history.deliveries[earlier], history.deliveries[later]
            # Never two live leases: the next delivery only after the lease ran out.
            assert d1.received_ms >= d0.lease_expires_ms, (message_id, history)
            assert d1.received_ms >= d1.due_ms, (message_id, history)
            # Redelivered after the back-off of the failed attempt (minus its jitter).
            full = backoff(earlier)
            assert d1.due_ms >= d0.lease_expires_ms + full * (1 - JITTER) - 1, (message_id, history)
            if later == earlier + 1 and not d0.ack:
                # A lease that simply ran out: due exactly at expiry + back-off.
                assert d1.due_ms <= d0.lease_expires_ms + full, (message_id, history)
                redelivered_after_expiry += 1
            if d0.ack == "abort":
                aborted += 1
        if history.deliveries[attempts[-1]].ack == "abort":
            raise AssertionError(f"{message_id}: its ack was rolled back, yet never redelivered")
    assert redelivered_after_expiry > 0, "some leases ran out (killed workers)"
    assert aborted > 0, "some acks were rolled back and redelivered"
