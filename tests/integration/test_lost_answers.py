"""A transactional publish whose answer is lost must never become visible: ``txn serve``
and ``tms serve --tx-server`` as real processes.

* The messaging service is frozen (SIGSTOP) past the client's timeout while a
  ``TransactionContext`` commits; the publisher cannot prove its rollback, so the
  transaction is invalidated, not aborted. After SIGCONT the service handles the delayed
  request; a new transactional consumer never sees those messages.
* Publisher contexts run while the messaging service is killed (kill -9) and restarted
  several times: at the end a transactional consumer sees every committed transaction's
  messages exactly once, and nothing of any other.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.procs import ProcessStack
from tms.client import MessagingClient
from tms.client.aware import TransactionalPublisher
from tms.errors import TmsError
from tms.model import TopicId
from txn.context import TransactionContext
from txn.errors import TransactionFailureError, TxError

T = TopicId("ns", "lost")


def visible(stack: ProcessStack) -> list[bytes]:
    """What a new transactional consumer sees."""
    reader = stack.tx.start_short()
    try:
        with MessagingClient(stack.url, retries=2) as client:
            return [m.payload for m in client.poll(T, transaction=reader).messages]
    finally:
        stack.tx.abort(reader)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[ProcessStack]:
    with ProcessStack(tmp_path, topics=[T]) as running:
        yield running


@pytest.mark.parametrize("staged", [False, True], ids=["buffered", "staged"])
def test_a_commit_whose_publish_times_out_stays_invisible(
    stack: ProcessStack, staged: bool
) -> None:
    client = MessagingClient(stack.url, timeout_s=1.0, retries=0)
    publisher = TransactionalPublisher(client, staged=staged)
    assert stack.tms.proc is not None
    ctx = TransactionContext(stack.tx, publisher)
    tx = ctx.start()
    publisher.publish(T, [b"lost-1", b"lost-2"])
    # Given the messaging service frozen while the context commits (the publish, or the
    # commit marker of the staged payloads, is sent and never answered)
    stack.tms.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(TransactionFailureError):
            ctx.finish()
    finally:
        stack.tms.proc.send_signal(signal.SIGCONT)
    client.close()
    # Then the transaction was invalidated, not aborted
    assert tx.transaction_id in stack.tx.write_pointer_state([tx.transaction_id]).invalid
    # And once the service has handled the delayed request, no consumer sees it
    time.sleep(0.5)
    with MessagingClient(stack.url) as other:
        other.publish(T, [b"later"])
    assert visible(stack) == [b"later"]


def test_a_lost_rollback_answer_counts_as_failed(stack: ProcessStack) -> None:
    client = MessagingClient(stack.url, timeout_s=1.0, retries=0)
    publisher = TransactionalPublisher(client)
    assert stack.tms.proc is not None
    ctx = TransactionContext(stack.tx, publisher)
    tx = ctx.start()
    publisher.publish(T, [b"rolled-back?"])
    assert publisher.commit_tx()  # published (consumers hold at it)
    # When the rollback is sent to a frozen service
    stack.tms.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(TransactionFailureError):
            ctx.abort(TransactionFailureError("the application gave up"))
    finally:
        stack.tms.proc.send_signal(signal.SIGCONT)
    client.close()
    # Then the transaction is invalid: its message stays hidden either way
    assert tx.transaction_id in stack.tx.write_pointer_state([tx.transaction_id]).invalid
    assert visible(stack) == []


def _publisher_loop(
    stack: ProcessStack, name: str, stop: threading.Event, outcomes: dict[str, bool]
) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        key = f"{name}-{n}"
        client = MessagingClient(stack.url, timeout_s=2.0, retries=0)
        publisher = TransactionalPublisher(client, staged=n % 2 == 0)
        ctx = TransactionContext(stack.tx, publisher)
        try:
            ctx.start()
            publisher.publish(T, [f"{key}/{i}".encode() for i in range(3)])
            ctx.finish()
            outcomes[key] = True
        except (TransactionFailureError, TmsError, TxError):
            outcomes[key] = False
            with contextlib.suppress(Exception):
                ctx.abort()
            time.sleep(0.05)
        finally:
            client.close()


def test_kill_9_loop_never_shows_uncommitted_messages(stack: ProcessStack) -> None:
    outcomes: dict[str, bool] = {}
    stop = threading.Event()
    threads = [
        threading.Thread(target=_publisher_loop, args=(stack, f"p{i}", stop, outcomes))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    try:
        for _ in range(4):
            time.sleep(0.7)
            stack.tms.kill_if_running()
            time.sleep(0.2)
            stack.restart_tms()
        time.sleep(0.7)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    committed = {k for k, ok in outcomes.items() if ok}
    failed = {k for k, ok in outcomes.items() if not ok}
    assert committed and failed, "the kills must have hit some transactions and spared some"
    seen: dict[str, list[int]] = {}
    for payload in visible(stack):
        key, index = payload.decode().rsplit("/", 1)
        seen.setdefault(key, []).append(int(index))
    assert set(seen) == committed, (sorted(set(seen) - committed), sorted(committed - set(seen)))
    assert all(indexes == [0, 1, 2] for indexes in seen.values())
