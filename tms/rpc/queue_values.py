"""Between a queue's value objects (``tms.queues``) and the binary protocol's queue
structs, the clients' side (pure): the requests ``tms.client.rpc`` and ``tms.aio`` send
for ops 7, 8 and 12-14 and what they read back. The server's side is
``tms.rpc.writes``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tms.errors import TmsCodecError
from tms.model import TopicId
from tms.queues import AckOutcome, Enqueued, EnqueueItem, QueueMessage, Receipt
from tms.rpc.frames import rpc

__all__ = [
    "ack_request",
    "enqueue_request",
    "enqueued_of",
    "messages_of",
    "nack_request",
    "outcomes_of",
    "receive_request",
]


def enqueue_request(
    topic: TopicId, items: Sequence[EnqueueItem], tx_write_pointer: int | None
) -> Any:
    """An ``EnqueueRequest``; the optional columns only when a message needs them."""
    keys = [item.key or "" for item in items]
    delays = [item.delay_ms for item in items]
    at = [item.at_ms if item.at_ms is not None else -1 for item in items]
    priorities = [item.priority for item in items]
    return rpc.EnqueueRequest(
        ns=topic.namespace,
        topic=topic.topic,
        payloads=[item.payload for item in items],
        keys=keys if any(keys) else None,
        delays_ms=delays if any(delays) else None,
        at_ms=at if any(a != -1 for a in at) else None,
        priorities=priorities if any(priorities) else None,
        write_pointer=tx_write_pointer,
    )


def enqueued_of(response: Any) -> list[Enqueued]:
    ids, duplicates = response.ids or [], response.duplicates or []
    if len(ids) != len(duplicates):
        raise TmsCodecError("an enqueue answer needs one duplicate flag per id")
    return [Enqueued(i, bool(d)) for i, d in zip(ids, duplicates, strict=True)]


def receive_request(
    topic: TopicId, max_messages: int, lease_ms: int | None, wait_ms: int = 0
) -> Any:
    return rpc.ReceiveRequest(
        ns=topic.namespace,
        topic=topic.topic,
        max=max_messages,
        lease_ms=lease_ms,
        wait_ms=wait_ms or None,
    )


def messages_of(r: Any) -> list[QueueMessage]:
    """The messages of a ``ReceiveResponse`` (its columns)."""
    try:
        return [
            QueueMessage(i, p, a, e, d, pr, x, k or None)
            for i, p, a, e, d, pr, x, k in zip(
                r.ids or (), r.payloads or (), r.attempts or (), r.enqueued_ms or (),
                r.due_ms or (), r.priorities or (), r.lease_expires_ms or (), r.keys or (),
                strict=True,
            )
        ]  # fmt: skip
    except ValueError as exc:
        raise TmsCodecError(f"a receive answer's columns differ in length: {exc}") from exc


def _receipt_columns(receipts: Sequence[Receipt]) -> tuple[list[bytes], list[int]]:
    return [r.id for r in receipts], [r.attempt for r in receipts]


def ack_request(topic: TopicId, receipts: Sequence[Receipt], tx_write_pointer: int | None) -> Any:
    ids, attempts = _receipt_columns(receipts)
    return rpc.AckRequest(
        ns=topic.namespace, topic=topic.topic, ids=ids, attempts=attempts,
        write_pointer=tx_write_pointer,
    )  # fmt: skip


def nack_request(topic: TopicId, receipts: Sequence[Receipt], delay_ms: int | None) -> Any:
    ids, attempts = _receipt_columns(receipts)
    return rpc.NackRequest(
        ns=topic.namespace, topic=topic.topic, ids=ids, attempts=attempts, delay_ms=delay_ms
    )


def outcomes_of(response: Any) -> list[AckOutcome]:
    """The outcomes of an ``AckResponse`` (an ack's or a nack's)."""
    try:
        return [AckOutcome(o) for o in response.outcomes or ()]
    except ValueError as exc:
        raise TmsCodecError(f"unknown outcome in an ack answer: {exc}") from exc
