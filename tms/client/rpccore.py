"""The sans-I/O core of the binary protocol's clients (docs/rpc.md): what
``tms.client.rpc.RpcMessagingClient`` (threads) and ``tms.aio.client.AsyncMessagingClient``
(asyncio) share, with no sockets, sleeps or clocks in it (as h11 is to an HTTP library).

* ``Call``: one request as a value — its operation, its body bytes, the topic that routes
  it, whether it may be sent again after a lost answer, how long the server may hold it
  (a long poll), and how its response struct reads as the client's answer. The
  functions below build one per client method (``publish``, ``poll``, ``enqueue`` ...),
  so argument checks, request building and answer decoding are written once.
* ``Attempts``: the decisions of one call's tries — after a failure, after an answer:
  give the answer, raise, go to the topic's owner (``tms.client.owners``) or try again
  after a back-off pause (``txms_common.retry.backoff``). The shells acquire a
  connection, send, wait and sleep; ``Attempts`` says what comes next.

A plain publish (not transactional, no TTLs) of up to ``PLAIN_MOST`` payloads is sent as
the body ``tms.rpc.frames.plain_publish_body`` builds from its bytes; a larger one as
thriftpy2 encodes the ``PublishRequest``, whose C loop over the payloads is then the
cheaper (docs/benchmarks.md). The bytes are the same either way, and the server's fast
path reads both without a struct.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Any, Generic, TypeVar

from tms.client.channel import RETRY, ChannelError, answer_of, check_retry, error_of
from tms.client.http import MarkersOutcome, PollResult, RollbackToken
from tms.client.owners import OwnerRoutes
from tms.errors import ServiceUnavailableError
from tms.ids import MessageId
from tms.model import TopicBounds, TopicId
from tms.queues import AckOutcome, Enqueued, EnqueueItem, QueueMessage, Receipt
from tms.rpc import queue_values as qv
from tms.rpc.frames import FLAG_ERROR, Frame, encode_body, plain_names, plain_publish_body, rpc
from tms.rpc.ops import BY_NAME, Op
from tms.rpc.values import (
    bounds_of,
    messages_of,
    payloads_of,
    poll_request,
    publish_request,
    rollback_range,
    token_of,
)
from txms_common.retry import backoff
from txn.transaction import Transaction

__all__ = [
    "AGAIN",
    "Attempts",
    "Call",
    "Pause",
    "ack",
    "bounds",
    "enqueue",
    "make_call",
    "markers",
    "nack",
    "no_answer",
    "poll",
    "publish",
    "publish_body",
    "receive",
    "rollback",
    "rollback_token",
    "settle",
    "store",
]

T = TypeVar("T")

PUBLISH, STORE, ROLLBACK = BY_NAME["publish"], BY_NAME["store"], BY_NAME["rollback"]
MARKERS, POLL, BOUNDS = BY_NAME["markers"], BY_NAME["poll"], BY_NAME["bounds"]
RECEIVE, ACK, NACK = BY_NAME["receive"], BY_NAME["ack"], BY_NAME["nack"]
ENQUEUE, SETTLE = BY_NAME["enqueue"], BY_NAME["settle"]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request: ``op`` with ``body`` (the encoded request struct), routed by
    ``topic``; ``retry_lost``: it may be sent again after its answer was lost;
    ``wait_s``: how long the server may hold it before answering; ``read``: its
    response struct as the client's answer."""

    op: Op
    body: bytes
    topic: object
    retry_lost: bool
    wait_s: float
    read: Callable[[Any], T]


def make_call(
    op: Op,
    request: Any,
    read: Callable[[Any], T],
    topic: object,
    *,
    idempotent: bool | None = None,
    wait_s: float = 0.0,
) -> Call[T]:
    """``op``'s call of ``request``, sent again after a lost answer when ``idempotent``
    (by default: when ``op`` is)."""
    retry_lost = op.idempotent if idempotent is None else idempotent
    return Call(op, encode_body(request), topic, retry_lost, wait_s, read)


def no_answer(_response: Any) -> None:
    return None


# -- messages -----------------------------------------------------------------------------


PLAIN_MOST = 8
"""The most payloads of a publish whose body is built from its bytes (measured: cheaper
than a struct up to about 8-16 payloads of 100 bytes, dearer beyond)."""


@lru_cache(maxsize=1024)
def _names(namespace: str, topic: str) -> bytes:
    return plain_names(namespace, topic)


def publish_body(
    topic: TopicId,
    data: list[bytes],
    tx_write_pointer: int | None,
    ttls: Iterable[int | None] | None,
) -> bytes:
    """The body of a publish of ``data`` (payloads already ``payloads_of``): built from
    its bytes when plain and small, else the encoded ``PublishRequest`` (the same bytes
    either way)."""
    if tx_write_pointer is None and ttls is None and 0 < len(data) <= PLAIN_MOST:
        return plain_publish_body(_names(topic.namespace, topic.topic), data)
    return encode_body(publish_request(topic, data, tx_write_pointer, ttls))


def rollback_token(response: Any) -> RollbackToken | None:
    """A ``PublishResponse`` as ``publish`` returns it."""
    if response.rollback is None:
        return None
    return RollbackToken(*token_of(response.rollback))


def publish(
    topic: TopicId,
    payloads: Iterable[bytes | str],
    tx_write_pointer: int | None = None,
    ttls: Iterable[int | None] | None = None,
) -> Call[RollbackToken | None]:
    """``MessagingClient.publish``; sent again after a lost answer only when it is a
    transaction's marker (no payloads: a repeat writes the same marker)."""
    data = payloads_of(payloads)
    marker = tx_write_pointer is not None and not data
    body = publish_body(topic, data, tx_write_pointer, ttls)
    return Call(PUBLISH, body, topic, marker, 0.0, rollback_token)


def store(
    topic: TopicId,
    payloads: Iterable[bytes | str],
    tx_write_pointer: int,
    ttls: Iterable[int | None] | None = None,
) -> Call[None]:
    request = publish_request(topic, payloads_of(payloads), tx_write_pointer, ttls)
    return make_call(STORE, request, no_answer, topic)


def rollback(topic: TopicId, token: RollbackToken) -> Call[None]:
    request = rpc.RollbackRequest(
        ns=topic.namespace, topic=topic.topic, rollback=rollback_range(token.detail)
    )
    return make_call(ROLLBACK, request, no_answer, topic)


def _markers_outcome(response: Any) -> MarkersOutcome:
    tokens = [RollbackToken(*token_of(m)) for m in response.markers or ()]
    return MarkersOutcome(tokens, bool(response.duplicate))


def markers(
    topic: TopicId, write_pointers: Iterable[int], idempotency_key: str | None = None
) -> Call[MarkersOutcome]:
    request = rpc.MarkersRequest(
        ns=topic.namespace,
        topic=topic.topic,
        write_pointers=list(write_pointers),
        idempotency_key=idempotency_key,
    )
    return make_call(MARKERS, request, _markers_outcome, topic)


def bounds(
    topic: TopicId,
    start: MessageId | bytes | str | int | None,
    inclusive: bool,
    transaction: Transaction | None,
) -> Call[TopicBounds]:
    request = poll_request(topic, start, inclusive, None, transaction)
    return make_call(BOUNDS, request, bounds_of, topic)


def _poll_result(response: Any) -> PollResult:
    return PollResult(messages_of(response), bool(response.held))


def poll(  # noqa: PLR0917 - MessagingClient.poll's parameters, in order
    topic: TopicId,
    start: MessageId | bytes | str | int | None,
    inclusive: bool,
    limit: int | None,
    transaction: Transaction | None,
    wait_ms: int,
) -> Call[PollResult]:
    request = poll_request(topic, start, inclusive, limit, transaction, wait_ms)
    return make_call(POLL, request, _poll_result, topic, wait_s=wait_ms / 1000)


# -- queues -------------------------------------------------------------------------------


def enqueue(
    topic: TopicId, items: Sequence[EnqueueItem], tx_write_pointer: int | None
) -> Call[list[Enqueued]]:
    """Sent again after a lost answer only when every message has a key (a repeat is
    then a duplicate)."""
    request = qv.enqueue_request(topic, items, tx_write_pointer)
    keyed = all(item.key is not None for item in items)
    return make_call(ENQUEUE, request, qv.enqueued_of, topic, idempotent=keyed)


def receive(
    topic: TopicId, max_messages: int, lease_ms: int | None, wait_ms: int
) -> Call[list[QueueMessage]]:
    request = qv.receive_request(topic, max_messages, lease_ms, wait_ms)
    return make_call(RECEIVE, request, qv.messages_of, topic, wait_s=wait_ms / 1000)


def ack(
    topic: TopicId, receipts: Sequence[Receipt], tx_write_pointer: int | None
) -> Call[list[AckOutcome]]:
    request = qv.ack_request(topic, receipts, tx_write_pointer)
    return make_call(ACK, request, qv.outcomes_of, topic)


def nack(
    topic: TopicId, receipts: Sequence[Receipt], delay_ms: int | None
) -> Call[list[AckOutcome]]:
    request = qv.nack_request(topic, receipts, delay_ms)
    return make_call(NACK, request, qv.outcomes_of, topic)


def _settled(response: Any) -> int:
    return int(response.settled or 0)


def settle(topic: TopicId, tx_write_pointer: int, commit: bool) -> Call[int]:
    request = rpc.SettleRequest(
        ns=topic.namespace, topic=topic.topic, write_pointer=tx_write_pointer, commit=commit
    )
    return make_call(SETTLE, request, _settled, topic)


# -- the tries of one call ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pause:
    """Try again after ``seconds`` (a back-off or a wait for the owner)."""

    seconds: float


AGAIN: Any = object()
"""Try again at once (to the topic's owner, now known)."""


class Attempts(Generic[T]):
    """The decisions of ``call``'s tries (see the module docstring): ``pool()`` is the
    connections the next try uses (the topic's owner's, by ``routes``); after a try,
    ``failed`` or ``answered`` says what comes next: the answer, ``Pause``, ``AGAIN``,
    or the error raised. ``retries`` tries are made again at most, ``backoff_s`` apart
    (growing, up to 4 s); not-owner redirections do not count. Not thread-safe: one
    call's."""

    __slots__ = ("_delays", "_hops", "_routes", "call", "queue_ms", "timeout_s")

    def __init__(
        self,
        call: Call[T],
        routes: OwnerRoutes[Any],
        *,
        timeout_s: float,
        retries: int,
        backoff_s: float,
    ) -> None:
        self.call = call
        self._routes = routes
        self.timeout_s = timeout_s + call.wait_s
        """How long a try waits for its answer."""
        self.queue_ms = max(1, int(timeout_s * 500))
        """How long the server may keep the request queued before it drops it unprocessed
        (half the timeout: the caller hears of it in time to try again)."""
        self._delays: Iterator[float] = islice(backoff(backoff_s, 4.0), retries)
        self._hops = 0

    def pool(self) -> Any:
        return self._routes.pool(self.call.topic)

    def failed(
        self,
        pool: Any,
        channel: Any,
        failure: ChannelError | ServiceUnavailableError,
    ) -> Pause:
        """A try that got no answer (``channel``: the connection it used, or None; a dead
        one the shell discards from ``pool``): the pause before the next, or the
        ``ServiceUnavailableError`` raised."""
        if channel is not None and channel.dead:
            pool.endpoints.failed(channel.address)
        self._routes.lost(self.call.topic, pool)
        delay = next(self._delays, None)
        check_retry(self.call.op, failure, retry_lost=self.call.retry_lost, again=delay is not None)
        assert delay is not None
        return Pause(delay)

    def answered(self, frame: Frame) -> Any:
        """A try answered with ``frame``: the call's answer, ``AGAIN`` or ``Pause`` (or
        the error the answer carries, raised)."""
        call = self.call
        if frame.flags & FLAG_ERROR:  # not_owner: to the owner (tms.client.owners)
            pause = self._routes.redirect(call.topic, error_of(frame, call.topic), self._hops)
            if pause is not None:
                self._hops += 1
                return Pause(pause) if pause else AGAIN
        delay = next(self._delays, None)
        answer = answer_of(
            call.op, frame, topic=call.topic, retry_lost=call.retry_lost, again=delay is not None
        )
        if answer is RETRY:
            assert delay is not None
            return Pause(delay)
        return call.read(answer)
