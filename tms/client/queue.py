"""Queues from Python (``tms.queues`` over the REST API): ``Queue`` for one queue,
``TransactionalQueue`` to enqueue and ack inside transactions, ``Worker`` to run a
function per message.

Over the binary protocol (a ``tms://`` client), ``enqueue``, ``receive`` (waiting too),
``ack``, ``nack`` and ``settle`` are binary requests (docs/rpc.md); ``stats`` goes over
REST.

``Queue`` calls are retried when the service is unavailable if repeating them cannot do
harm: ``ack`` (a repeated ack answers ``acked``), ``settle``, ``stats``, ``receive``
(a lease whose answer was lost expires and its message is delivered again), and an
``enqueue`` whose every message has a key (a repeat is a duplicate). A keyless enqueue
is sent once.

``TransactionalQueue`` (a ``txn.TransactionAware``): inside a transaction, ``enqueue``
and ``ack`` are sent at once under the transaction's write pointer — the service keeps
the messages pending and the acks undecided — and ``post_tx_commit`` settles them
(enqueued messages deliverable, acks final). The service also settles on its own once
it sees the transaction committed (with a transaction service), so a client that dies
after the commit loses nothing. ``rollback_tx`` settles them the other way (messages
gone, acked messages leased again until their lease runs out); when a write's outcome
is unknown or that settle fails it returns False, so the context *invalidates* the
transaction and the service drops its pending work (an aborted pointer would read as
committed).

``Worker``: receives up to ``batch`` messages (waiting up to ``wait_s``), calls the
handler once per message, acks it when the handler returns and nacks it when it raises
(the queue's back-off then decides when it comes back; after ``max_attempts`` it is
dead-lettered).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable
from typing import TypeVar

from tms.client.http import MessagingClient
from tms.client.queuecore import (
    Deliveries,
    TxQueueWork,
    delay_ms_of,
    items_of,
    lease_ms_of,
    receipts_of,
    wait_ms_of,
)
from tms.client.rpc import RpcMessagingClient
from tms.codec import queue_json as qj
from tms.codec.json import loads_object
from tms.errors import TmsError
from tms.model import TopicId
from tms.queues import AckOutcome, Enqueued, EnqueueItem, QueueMessage, QueueStats
from txn.transaction import Transaction

__all__ = ["Deliveries", "Queue", "TransactionalQueue", "Worker", "items_of", "receipts_of"]

log = logging.getLogger(__name__)

JSON = "application/json"
R = TypeVar("R")


class Queue:
    """One queue of a ``MessagingClient`` (see the module docstring). Thread-safe."""

    def __init__(self, client: MessagingClient, topic: TopicId) -> None:
        self.client = client
        self.topic = topic

    def _post(
        self, action: str, body: bytes, *, idempotent: bool, timeout_s: float | None = None
    ) -> bytes:
        reply = self.client._request(
            "POST",
            self.client._url(self.topic, action=action),
            topic=self.topic,
            body=body,
            content_type=JSON,
            idempotent=idempotent,
            timeout_s=timeout_s,
        )
        return reply.content

    def enqueue(
        self,
        messages: Iterable[EnqueueItem | bytes | str],
        *,
        tx_write_pointer: int | None = None,
    ) -> list[Enqueued]:
        """Enqueue (``EnqueueItem`` for a key, a schedule or a priority); the ids."""
        items = items_of(messages)
        if isinstance(self.client, RpcMessagingClient):
            return self.client.enqueue_queue(self.topic, items, tx_write_pointer)
        body = qj.encode_enqueue_request(items, tx_write_pointer)
        keyed = all(item.key is not None for item in items)
        return qj.decode_enqueue_response(self._post("enqueue", body, idempotent=keyed))

    def receive(
        self, max_messages: int = 1, *, lease_s: float | None = None, wait_s: float = 0
    ) -> list[QueueMessage]:
        """Lease up to ``max_messages`` due messages (for ``lease_s``, else the queue's
        ``lease_s``), waiting up to ``wait_s`` for one."""
        lease_ms, wait_ms = lease_ms_of(lease_s), wait_ms_of(wait_s)
        if isinstance(self.client, RpcMessagingClient):
            return self.client.receive_queue(self.topic, max_messages, lease_ms, wait_ms)
        body = qj.encode_receive_request(max_messages, lease_ms)
        reply = self.client._request(
            "POST",
            self.client._url(self.topic, action="receive"),
            topic=self.topic,
            body=body,
            content_type=JSON,
            params={"wait_ms": str(wait_ms)} if wait_ms else None,
            timeout_s=self.client._timeout + wait_s,
        )
        return list(qj.decode_receive_response(reply.content).messages)

    def ack(
        self, deliveries: Deliveries, *, tx_write_pointer: int | None = None
    ) -> list[AckOutcome]:
        """Finish deliveries (messages or their receipts); an outcome each."""
        receipts = receipts_of(deliveries)
        if isinstance(self.client, RpcMessagingClient):
            return self.client.ack_queue(self.topic, receipts, tx_write_pointer)
        body = qj.encode_ack_request(receipts, tx_write_pointer)
        return qj.decode_outcomes(self._post("ack", body, idempotent=True))

    def nack(self, deliveries: Deliveries, *, delay_s: float | None = None) -> list[AckOutcome]:
        """Return deliveries, due again after ``delay_s`` (None: the queue's back-off)."""
        delay_ms = delay_ms_of(delay_s)
        receipts = receipts_of(deliveries)
        if isinstance(self.client, RpcMessagingClient):
            return self.client.nack_queue(self.topic, receipts, delay_ms)
        body = qj.encode_nack_request(receipts, delay_ms)
        return qj.decode_outcomes(self._post("nack", body, idempotent=False))

    def settle(self, tx_write_pointer: int, *, commit: bool) -> int:
        """Settle a transaction's pending enqueues and acks here; how many (needs
        ``write`` on the queue)."""
        if isinstance(self.client, RpcMessagingClient):
            return self.client.settle_queue(self.topic, tx_write_pointer, commit)
        body = qj.encode_settle_request(tx_write_pointer, commit)
        reply = self._post("settle", body, idempotent=True)
        return int(loads_object(reply, "settle response").get("settled", 0))

    def stats(self) -> QueueStats:
        reply = self.client._request(
            "GET", self.client._url(self.topic, action="queue"), topic=self.topic
        )
        return qj.decode_queue_stats(reply.content)


class TransactionalQueue:
    """See the module docstring."""

    def __init__(self, client: MessagingClient, *, name: str = "tms-queue") -> None:
        self.client = client
        self.name = name
        self._tx: Transaction | None = None
        self._work = TxQueueWork()

    @property
    def transaction(self) -> Transaction | None:
        return self._tx

    def enqueue(
        self, topic: TopicId, messages: Iterable[EnqueueItem | bytes | str]
    ) -> list[Enqueued]:
        """Enqueue now (no transaction), or pending until the transaction commits."""
        return self._call(topic, lambda q, wp: q.enqueue(messages, tx_write_pointer=wp))

    def ack(self, topic: TopicId, deliveries: Deliveries) -> list[AckOutcome]:
        """Ack now (no transaction), or when the transaction commits."""
        return self._call(topic, lambda q, wp: q.ack(deliveries, tx_write_pointer=wp))

    def _call(self, topic: TopicId, call: Callable[[Queue, int | None], R]) -> R:
        queue = Queue(self.client, topic)
        tx = self._tx
        if tx is None:
            return call(queue, None)
        self._work.joined(topic, tx.write_pointer)
        try:
            return call(queue, tx.write_pointer)
        except BaseException as exc:
            self._work.failed(exc)
            raise

    # -- TransactionAware ---------------------------------------------------------------

    def start_tx(self, tx: Transaction) -> None:
        self._reset()
        self._tx = tx

    def update_tx(self, tx: Transaction) -> None:
        self._tx = tx  # a checkpoint: the earlier pointers are settled with the new one

    def get_tx_changes(self) -> Collection[bytes]:
        return ()

    def commit_tx(self) -> bool:
        return True

    def post_tx_commit(self) -> None:
        try:
            for topic, wp in self._work.to_settle():
                try:
                    Queue(self.client, topic).settle(wp, commit=True)
                except TmsError:  # the service settles it by itself
                    log.warning("could not settle %s of transaction %d yet", topic, wp)
        finally:
            self._reset()

    def rollback_tx(self) -> bool:
        settled_all = True
        try:
            for topic, wp in self._work.to_settle():
                try:
                    Queue(self.client, topic).settle(wp, commit=False)
                except TmsError:
                    settled_all = False
            return self._work.rollback_proven(settled_all)
        finally:
            self._reset()

    def transaction_aware_name(self) -> str:
        return self.name

    def _reset(self) -> None:
        self._tx = None
        self._work = TxQueueWork()


class Worker:
    """See the module docstring."""

    def __init__(
        self,
        queue: Queue,
        handler: Callable[[QueueMessage], object],
        *,
        batch: int = 10,
        lease_s: float | None = None,
        wait_s: float = 20.0,
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.batch = batch
        self.lease_s = lease_s
        self.wait_s = wait_s
        self.processed = 0
        self.failed = 0
        self._stop = threading.Event()

    def stop(self) -> None:
        """Stop after the current batch."""
        self._stop.set()

    def run_once(self) -> int:
        """One receive and its messages handled; how many were received."""
        messages = self.queue.receive(self.batch, lease_s=self.lease_s, wait_s=self.wait_s)
        done: list[QueueMessage] = []
        for message in messages:
            try:
                self.handler(message)
            except Exception:
                log.exception(
                    "handler failed on %s (attempt %d)", message.id.hex(), message.attempt
                )
                self.failed += 1
                self.queue.nack([message])
            else:
                done.append(message)
        if done:
            self.queue.ack(done)
            self.processed += len(done)
        return len(messages)

    def run(self, *, until_empty: bool = False) -> None:
        """Work until ``stop`` (or, with ``until_empty``, until a receive finds nothing)."""
        while not self._stop.is_set():
            if not self.run_once() and until_empty:
                return
