"""The binary protocol's writes as the core's typed write operations (``tms.operations``),
both ways (pure): the operation a request body asks for, and the response body of its
result. Each pair is named by its entry in ``tms.rpc.ops.OPS``; the server submits the
operation to the topic's group commit (``MessagingService.submit_async``).

A new kind of write (a subscription's commit, a queue's ack) is its operation class in
``tms.operations``, a pair of functions here, and its entry in ``OPS``. A queue's
operations are here (``enqueue``, ``receive``, ``ack``, ``nack``, ``settle``:
docs/queues.md); a receive that waits is ``tms.rpc.backend.Backend.receive``'s, around
``receive``.
"""

from __future__ import annotations

from typing import Any

from tms.errors import TmsInvalidArgumentError
from tms.model import MarkersRequest, MarkersResult, RollbackDetail, StoreRequest, TopicId
from tms.operations import Ack, Enqueue, Markers, Nack, Publish, Receive, Rollback, Settle, Store
from tms.queues import (
    AckOutcome,
    AckRequest,
    Enqueued,
    EnqueueItem,
    EnqueueRequest,
    NackRequest,
    Receipt,
    ReceiveRequest,
    ReceiveResult,
    SettleRequest,
)
from tms.rpc.frames import encode_body, rpc
from tms.rpc.values import rollback_detail, rollback_range

__all__ = [
    "EMPTY_BODY",
    "ack",
    "enqueue",
    "enqueue_answer",
    "markers",
    "markers_answer",
    "nack",
    "outcomes_answer",
    "plain_payloads",
    "plain_publish",
    "publish",
    "publish_answer",
    "receive",
    "receive_answer",
    "rollback",
    "rollback_answer",
    "settle",
    "settle_answer",
    "store",
    "store_answer",
]

EMPTY_BODY = encode_body(rpc.Empty())
"""The encoded ``Empty`` struct: also a ``PublishResponse`` without a rollback range."""


def _store_request(req: Any, topic: TopicId) -> StoreRequest:
    payloads = req.payloads
    if payloads is None:
        raise TmsInvalidArgumentError("payloads are missing")
    ttls = req.ttls
    if ttls is not None:
        ttls = [ttl or None for ttl in ttls]
    return StoreRequest(topic, payloads, req.write_pointer, ttls)


def publish(req: Any, topic: TopicId) -> Publish:
    return Publish(_store_request(req, topic))


def plain_payloads(req: Any) -> list[bytes] | None:
    """The payloads of a publish that may be written as part of one ``Publish`` with
    the plain publishes next to it (``tms.rpc.backend``): not transactional, without
    TTLs, with at least one payload (what ``publish`` would make of it cannot fail on
    its own). None for any other."""
    payloads: list[bytes] | None = req.payloads
    if not payloads or req.write_pointer is not None or req.ttls is not None:
        return None
    return payloads


def plain_publish(topic: TopicId, payloads: list[bytes]) -> Publish:
    """One ``Publish`` of the payloads of several plain publishes, in order."""
    return Publish(StoreRequest(topic, payloads))


def publish_answer(detail: RollbackDetail | None) -> Any:
    if detail is None:
        return EMPTY_BODY  # encoded once: the answer to most publishes
    return rpc.PublishResponse(rollback=rollback_range(detail))


def store(req: Any, topic: TopicId) -> Store:
    return Store(_store_request(req, topic))


def store_answer(_result: None) -> Any:
    return EMPTY_BODY


def rollback(req: Any, topic: TopicId) -> Rollback:
    return Rollback(topic, rollback_detail(req.rollback))


def rollback_answer(count: int) -> Any:
    return rpc.RollbackResponse(rolled_back=count)


def markers(req: Any, topic: TopicId) -> Markers:
    if req.write_pointers is None:
        raise TmsInvalidArgumentError("write pointers are missing")
    return Markers(MarkersRequest(topic, tuple(req.write_pointers), req.idempotency_key))


def markers_answer(result: MarkersResult) -> Any:
    return rpc.MarkersResponse(
        markers=[rollback_range(d) for d in result.details], duplicate=result.duplicate
    )


def receive(req: Any, topic: TopicId) -> Receive:
    if req.max is None:
        raise TmsInvalidArgumentError("max is missing")
    return Receive(ReceiveRequest(topic, req.max, req.lease_ms))


def receive_answer(result: ReceiveResult) -> Any:
    messages = result.messages
    return rpc.ReceiveResponse(
        ids=[m.id for m in messages],
        payloads=[m.payload for m in messages],
        attempts=[m.attempt for m in messages],
        due_ms=[m.due_ms for m in messages],
        lease_expires_ms=[m.lease_expires_ms for m in messages],
        enqueued_ms=[m.enqueued_ms for m in messages],
        priorities=[m.priority for m in messages],
        keys=[m.key or "" for m in messages],
    )


def _receipts(req: Any) -> list[Receipt]:
    ids, attempts = req.ids, req.attempts
    if ids is None or attempts is None or len(ids) != len(attempts):
        raise TmsInvalidArgumentError("one attempt per id is needed")
    return [Receipt(i, a) for i, a in zip(ids, attempts, strict=True)]


def ack(req: Any, topic: TopicId) -> Ack:
    return Ack(AckRequest(topic, _receipts(req), req.write_pointer))


def outcomes_answer(outcomes: tuple[AckOutcome, ...]) -> Any:
    """The answer to an ack or a nack: an outcome per receipt."""
    return rpc.AckResponse(outcomes=[o.value for o in outcomes])


def nack(req: Any, topic: TopicId) -> Nack:
    return Nack(NackRequest(topic, _receipts(req), req.delay_ms))


def _column(values: list[Any] | None, n: int, what: str) -> list[Any] | None:
    if values is not None and len(values) != n:
        raise TmsInvalidArgumentError(f"{what}: one per payload ({n}), not {len(values)}")
    return values


def enqueue(req: Any, topic: TopicId) -> Enqueue:
    payloads = req.payloads
    if payloads is None:
        raise TmsInvalidArgumentError("payloads are missing")
    n = len(payloads)
    keys = _column(req.keys, n, "keys")
    delays = _column(req.delays_ms, n, "delays_ms")
    at = _column(req.at_ms, n, "at_ms")
    priorities = _column(req.priorities, n, "priorities")
    items = [
        EnqueueItem(
            payload,
            key=keys[i] or None if keys is not None else None,
            delay_ms=delays[i] if delays is not None else 0,
            at_ms=at[i] if at is not None and at[i] != -1 else None,
            priority=priorities[i] if priorities is not None else 0,
        )
        for i, payload in enumerate(payloads)
    ]
    return Enqueue(EnqueueRequest(topic, items, req.write_pointer))


def enqueue_answer(results: tuple[Enqueued, ...]) -> Any:
    return rpc.EnqueueResponse(
        ids=[r.id for r in results], duplicates=[r.duplicate for r in results]
    )


def settle(req: Any, topic: TopicId) -> Settle:
    if req.write_pointer is None or req.commit is None:
        raise TmsInvalidArgumentError("a settle carries a write pointer and commit")
    return Settle(SettleRequest(topic, req.write_pointer, bool(req.commit)))


def settle_answer(count: int) -> Any:
    return rpc.SettleResponse(settled=count)
