"""The binary protocol's writes as the core's typed write operations (``tms.operations``),
both ways (pure): the operation a request body asks for, and the response body of its
result. Each pair is named by its entry in ``tms.rpc.ops.OPS``; the server submits the
operation to the topic's group commit (``MessagingService.submit_async``).

A new kind of write (a subscription's commit, a queue's ack) is its operation class in
``tms.operations``, a pair of functions here, and its entry in ``OPS``. A queue's
receive and ack are here (``receive``, ``ack``: docs/queues.md).
"""

from __future__ import annotations

from typing import Any

from tms.errors import TmsInvalidArgumentError
from tms.model import MarkersRequest, MarkersResult, RollbackDetail, StoreRequest, TopicId
from tms.operations import Ack, Markers, Publish, Receive, Rollback, Store
from tms.queues import AckOutcome, AckRequest, Receipt, ReceiveRequest, ReceiveResult
from tms.rpc.frames import encode_body, rpc
from tms.rpc.values import rollback_detail, rollback_range

__all__ = [
    "EMPTY_BODY",
    "ack",
    "ack_answer",
    "markers",
    "markers_answer",
    "publish",
    "publish_answer",
    "receive",
    "receive_answer",
    "rollback",
    "rollback_answer",
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


def ack(req: Any, topic: TopicId) -> Ack:
    ids, attempts = req.ids, req.attempts
    if ids is None or attempts is None or len(ids) != len(attempts):
        raise TmsInvalidArgumentError("one attempt per id is needed")
    receipts = [Receipt(i, a) for i, a in zip(ids, attempts, strict=True)]
    return Ack(AckRequest(topic, receipts, req.write_pointer))


def ack_answer(outcomes: tuple[AckOutcome, ...]) -> Any:
    return rpc.AckResponse(outcomes=[o.value for o in outcomes])
