"""Write operations: every kind of write to a topic, a frozen value with its own result.

====================  ===============================  ===============================
kind                  carries                          result
====================  ===============================  ===============================
``Publish``           a ``StoreRequest``               its ``RollbackDetail`` if
                                                       transactional
``Store``             a ``StoreRequest``               None
``Rollback``          a topic and a ``RollbackDetail``   how many entries were negated
``Markers``           a ``MarkersRequest``             ``MarkersResult``
``WritePosition``     a subscription's position under  None
                      a write pointer (``tms.positions``)
``RollbackPosition``  a subscription and a write       how many rows were deleted
                      pointer                          (0 or 1)
``Enqueue``           an ``EnqueueRequest`` (queues)   an ``Enqueued`` per message
``Receive``           a ``ReceiveRequest``             ``ReceiveResult`` (the leased
                                                       messages)
``Ack``               an ``AckRequest``                an ``AckOutcome`` per receipt
``Nack``              a ``NackRequest``                an ``AckOutcome`` per receipt
``Settle``            a ``SettleRequest``              how many pending messages it
                                                       settled
``Maintain``          a queue topic                    how many messages it changed
``DeadLetterIn``      a queue, the source queue's      how many copies it added
                      prefix, its dead messages
``DeadLetterDone``    a queue, its dead-letter         how many it removed (or made
                      queue's prefix, ids of its       DEAD: no dead-letter queue)
                      dead messages
====================  ===============================  ===============================

The last eight are the operations of queue topics (``tms.queues``); the writer applies
them with ``tms.queue_batch`` (the dead-letter steps: ``tms.queue_dead``).

Each operation says what makes it invalid on its own (``check``) and which write
pointers it writes or rolls back under (``uses``: what the write-pointer guard and the
transaction-lifetime check look at), and ``apply`` hands it to its method of a
``WriteDispatch`` — the one dispatch, implemented by the topic writer (``tms.writer``),
typed end to end: ``Publish.apply`` returns what ``WriteDispatch.publish`` does. A
``Ticket`` carries one operation through a group-committed batch to its outcome.

A new kind of write is a class here and a method of ``WriteDispatch``, its rows in
``tms.store.tables`` (bytes in ``tms.codec``), and a route that submits it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

from tms.errors import TmsError, TmsInvalidArgumentError
from tms.guard import Use
from tms.ids import MessageId
from tms.model import MarkersRequest, MarkersResult, RollbackDetail, StoreRequest, TopicId
from tms.queues import (
    AckOutcome,
    AckRequest,
    Enqueued,
    EnqueueRequest,
    NackRequest,
    QueueMessage,
    ReceiveRequest,
    ReceiveResult,
    SettleRequest,
)

__all__ = [
    "Ack",
    "DeadLetterDone",
    "DeadLetterIn",
    "Enqueue",
    "Maintain",
    "Markers",
    "Nack",
    "Operation",
    "Publish",
    "Receive",
    "Rollback",
    "RollbackPosition",
    "Settle",
    "Store",
    "Ticket",
    "WriteDispatch",
    "WritePosition",
    "fail_tickets",
    "settle_tickets",
]

R_co = TypeVar("R_co", covariant=True)

PointerUses = tuple[tuple[int, Use], ...]
"""(write pointer, what the operation does with it), for the guard."""


class WriteDispatch(Protocol):
    """What applies each kind of operation, adding its rows to a batch: one method per
    kind. Each returns the operation's result, or raises the ``TmsError`` it fails with
    (the operation then adds nothing)."""

    def publish(self, op: Publish) -> RollbackDetail | None: ...

    def store(self, op: Store) -> None: ...

    def rollback(self, op: Rollback) -> int: ...

    def markers(self, op: Markers) -> MarkersResult: ...

    def write_position(self, op: WritePosition) -> None: ...

    def rollback_position(self, op: RollbackPosition) -> int: ...

    def enqueue(self, op: Enqueue) -> tuple[Enqueued, ...]: ...

    def receive(self, op: Receive) -> ReceiveResult: ...

    def ack(self, op: Ack) -> tuple[AckOutcome, ...]: ...

    def nack(self, op: Nack) -> tuple[AckOutcome, ...]: ...

    def settle(self, op: Settle) -> int: ...

    def maintain(self, op: Maintain) -> int: ...

    def dead_letter_in(self, op: DeadLetterIn) -> int: ...

    def dead_letter_done(self, op: DeadLetterDone) -> int: ...


class Operation(Protocol[R_co]):
    """One write to one topic (see the module docstring)."""

    kind: ClassVar[str]
    """The operation's name in metrics (``tms_requests_total{op}``)."""

    @property
    def topic(self) -> TopicId: ...

    def check(self) -> None:
        """Raise ``TmsInvalidArgumentError`` if it can never succeed as given."""

    def uses(self) -> PointerUses: ...

    def apply(self, dispatch: WriteDispatch) -> R_co: ...


def _written_under(request: StoreRequest) -> PointerUses:
    wp = request.tx_write_pointer
    return () if wp is None else ((wp, Use.WRITE),)


@dataclass(frozen=True, slots=True)
class Publish:
    """Append messages (an empty transactional request: the commit marker of the write
    pointer's stored payloads)."""

    request: StoreRequest
    kind: ClassVar[str] = "publish"

    @property
    def topic(self) -> TopicId:
        return self.request.topic

    def check(self) -> None:
        if not self.request.payloads and not self.request.transactional:
            raise TmsInvalidArgumentError(
                "Empty payload is only allowed for publishing transactional message. "
                f"Topic: {self.request.topic}"
            )

    def uses(self) -> PointerUses:
        return _written_under(self.request)

    def apply(self, dispatch: WriteDispatch) -> RollbackDetail | None:
        return dispatch.publish(self)


@dataclass(frozen=True, slots=True)
class Store:
    """Stage payloads under a write pointer, for its commit marker to publish."""

    request: StoreRequest
    kind: ClassVar[str] = "store"

    @property
    def topic(self) -> TopicId:
        return self.request.topic

    def check(self) -> None:
        if not self.request.transactional or not self.request.payloads:
            raise TmsInvalidArgumentError(
                f"Store request must be transactional with payload. Topic: {self.request.topic}"
            )

    def uses(self) -> PointerUses:
        return _written_under(self.request)

    def apply(self, dispatch: WriteDispatch) -> None:
        return dispatch.store(self)


@dataclass(frozen=True, slots=True)
class Rollback:
    """Negate the write pointer of a transactional publish's entries (in the topic's
    current generation)."""

    topic: TopicId
    detail: RollbackDetail
    kind: ClassVar[str] = "rollback"

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return ((self.detail.tx_write_pointer, Use.ROLLBACK),)

    def apply(self, dispatch: WriteDispatch) -> int:
        return dispatch.rollback(self)


@dataclass(frozen=True, slots=True)
class Markers:
    """Commit markers of several write pointers, next to each other (``MarkersRequest``)."""

    request: MarkersRequest
    kind: ClassVar[str] = "markers"

    @property
    def topic(self) -> TopicId:
        return self.request.topic

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return tuple((wp, Use.MARKER) for wp in self.request.write_pointers)

    def apply(self, dispatch: WriteDispatch) -> MarkersResult:
        return dispatch.markers(self)


@dataclass(frozen=True, slots=True)
class WritePosition:
    """Subscription ``name``'s position ``position`` written under ``write_pointer``, as
    part of that transaction (``tms.positions``), with the stamp of the state it was
    read from; ``superseded``: write pointers of the subscription's rows to delete in
    the same batch (``tms.positions``, "Compaction")."""

    topic: TopicId
    name: str
    write_pointer: int
    stamp: int
    position: MessageId
    written_ms: int
    superseded: tuple[int, ...] = ()
    kind: ClassVar[str] = "position"

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return ((self.write_pointer, Use.WRITE),)

    def apply(self, dispatch: WriteDispatch) -> None:
        return dispatch.write_position(self)


@dataclass(frozen=True, slots=True)
class RollbackPosition:
    """Delete subscription ``name``'s position under ``write_pointer`` (in progress or
    invalid, never committed: the guard checks)."""

    topic: TopicId
    name: str
    write_pointer: int
    kind: ClassVar[str] = "rollback_position"

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return ((self.write_pointer, Use.ROLLBACK),)

    def apply(self, dispatch: WriteDispatch) -> int:
        return dispatch.rollback_position(self)


def _tx_uses(wp: int | None, use: Use = Use.WRITE) -> PointerUses:
    return () if wp is None else ((wp, use),)


class _QueueOperation:
    """What the queue operations share: the topic is their request's, nothing makes
    them invalid that their request did not refuse already, and they write under no
    write pointer unless they say so."""

    __slots__ = ()
    request: EnqueueRequest | ReceiveRequest | AckRequest | NackRequest | SettleRequest

    @property
    def topic(self) -> TopicId:
        return self.request.topic

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return ()


@dataclass(frozen=True, slots=True)
class Enqueue(_QueueOperation):
    """Add messages to a queue (PENDING until their transaction commits, if any)."""

    request: EnqueueRequest
    kind: ClassVar[str] = "enqueue"

    def uses(self) -> PointerUses:
        return _tx_uses(self.request.tx_write_pointer)

    def apply(self, dispatch: WriteDispatch) -> tuple[Enqueued, ...]:
        return dispatch.enqueue(self)


@dataclass(frozen=True, slots=True)
class Receive(_QueueOperation):
    """Lease due messages (a write: the lease is durable before it is handed out)."""

    request: ReceiveRequest
    kind: ClassVar[str] = "receive"

    def apply(self, dispatch: WriteDispatch) -> ReceiveResult:
        return dispatch.receive(self)


@dataclass(frozen=True, slots=True)
class Ack(_QueueOperation):
    """Finish deliveries (at the transaction's commit, if transactional)."""

    request: AckRequest
    kind: ClassVar[str] = "ack"

    def uses(self) -> PointerUses:
        return _tx_uses(self.request.tx_write_pointer)

    def apply(self, dispatch: WriteDispatch) -> tuple[AckOutcome, ...]:
        return dispatch.ack(self)


@dataclass(frozen=True, slots=True)
class Nack(_QueueOperation):
    """Return deliveries to the queue."""

    request: NackRequest
    kind: ClassVar[str] = "nack"

    def apply(self, dispatch: WriteDispatch) -> tuple[AckOutcome, ...]:
        return dispatch.nack(self)


@dataclass(frozen=True, slots=True)
class Settle(_QueueOperation):
    """A transaction's outcome for its pending queue work: after a commit (the pointer
    must be committed) or instead of one (the pointer must be in progress or invalid)."""

    request: SettleRequest
    kind: ClassVar[str] = "settle"

    def uses(self) -> PointerUses:
        use = Use.COMMITTED if self.request.commit else Use.ROLLBACK
        return _tx_uses(self.request.tx_write_pointer, use)

    def apply(self, dispatch: WriteDispatch) -> int:
        return dispatch.settle(self)


@dataclass(frozen=True, slots=True)
class Maintain:
    """A queue's housekeeping now: expired leases, settled transactions, due messages,
    and with ``purge`` finished messages past the queue's ``purge_after_s``."""

    topic: TopicId
    purge: bool = False
    kind: ClassVar[str] = "maintain"

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return ()

    def apply(self, dispatch: WriteDispatch) -> int:
        return dispatch.maintain(self)


@dataclass(frozen=True, slots=True)
class DeadLetterIn:
    """Copies of dead messages of the queue whose prefix is ``origin`` into ``topic``,
    each once (``tms.queue_dead``, step 2)."""

    topic: TopicId
    origin: bytes
    messages: tuple[QueueMessage, ...]
    kind: ClassVar[str] = "dead_letter_in"

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return ()

    def apply(self, dispatch: WriteDispatch) -> int:
        return dispatch.dead_letter_in(self)


@dataclass(frozen=True, slots=True)
class DeadLetterDone:
    """Remove dead messages of ``topic`` whose copies the dead-letter queue with prefix
    ``target`` holds; ``target`` None: their dead-letter queue is gone, they become DEAD
    here (step 3)."""

    topic: TopicId
    target: bytes | None
    ids: tuple[bytes, ...]
    kind: ClassVar[str] = "dead_letter_done"

    def check(self) -> None:
        pass

    def uses(self) -> PointerUses:
        return ()

    def apply(self, dispatch: WriteDispatch) -> int:
        return dispatch.dead_letter_done(self)


class Ticket(Generic[R_co]):
    """One operation on its way through a batch: its result or error once the batch is
    done. Written by the batch's one leader, read by the caller after it was woken.
    ``deadline`` (``time.monotonic()``): an operation still queued then is not applied
    (``RequestTimeoutError``)."""

    __slots__ = ("_value", "deadline", "error", "op")

    _value: R_co

    def __init__(self, op: Operation[R_co], deadline: float | None = None) -> None:
        self.op = op
        self.deadline = deadline
        self.error: TmsError | None = None

    def apply(self, dispatch: WriteDispatch) -> None:
        """Apply the operation (raises what the dispatch raised)."""
        self._value = self.op.apply(dispatch)

    def fail(self, error: TmsError) -> None:
        self.error = error

    def result(self) -> R_co:
        """The operation's result, or raise its error."""
        if self.error is not None:
            raise self.error
        return self._value


def fail_tickets(tickets: Sequence[Ticket[object]], error: TmsError) -> None:
    for ticket in tickets:
        ticket.fail(error)


def settle_tickets(
    tickets: Sequence[Ticket[object]],
    settled: asyncio.Future[None],
    queued: asyncio.Future[None],
) -> None:
    """``queued``'s done callback (a group commit's future for ``tickets``): resolve
    ``settled`` once each ticket has its outcome; a batch that failed as a whole (a
    ``TmsError``) fails each ticket, anything else fails ``settled``."""
    if settled.done():
        return
    error = TmsError("the write was cancelled") if queued.cancelled() else queued.exception()
    if isinstance(error, TmsError):
        fail_tickets(tickets, error)
    elif error is not None:
        settled.set_exception(error)
        return
    settled.set_result(None)
