"""Work queues: value objects, a queue's settings and its back-off (pure).

A **queue** is a topic whose property ``kind`` is ``queue`` (``QueueConfig.KIND``).
Its consumers *compete*: each message is leased to one consumer at a time, acked once,
returned (nack) or redelivered when its lease expires, with exponential back-off and
jitter, and dead-lettered after ``max_attempts``; acked (and dead-lettered) messages
are purged ``purge_after_s`` after they were finished (Vitess messaging's model).

A message moves through these states (``QueueState``), one transition at a time in its
topic's writer (``tms.queue_batch``)::

    enqueue ──► PENDING ──commit──► SCHEDULED ──due──► READY ──receive──► LEASED
       │        (its transaction     ▲                   ▲                 │  │
       │         in progress;        └──── nack / lease expired ──────────┘  │
       │         rollback: gone)           (back-off; after max_attempts     │
       └──► SCHEDULED / READY              DEAD, or MOVING instead)           ack
                                                                          ▼
                                                               ACKED ──purge_after_s──► gone

A queue with a ``dead_letter_queue`` hands its dead messages to that queue instead of
keeping them: MOVING (a dead message on its way, counted as dead, never delivered) is
copied into the other queue, where it is READY (a new id; payload, key, priority,
enqueue time and attempts kept), and only then removed (``tms.queue_dead``).

A transactional ack leaves the message LEASED with the ack pending under its write
pointer: it becomes ACKED when that transaction commits and is dropped if it rolls
back (the lease then runs out as usual); while the ack is pending the message is not
redelivered.

Ids are 10 bytes, ``enqueue_ms(8) seq(2)`` big-endian, assigned by the topic's writer in
increasing order; a *receipt* is an id with the attempt number it was delivered with,
and only the current attempt's receipt can ack or nack a message.
"""

from __future__ import annotations

import enum
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tms.errors import TmsInvalidArgumentError
from tms.model import TopicId

__all__ = [
    "QUEUE_ID_SIZE",
    "AckOutcome",
    "AckRequest",
    "EnqueueItem",
    "EnqueueRequest",
    "Enqueued",
    "NackRequest",
    "QueueConfig",
    "QueueMessage",
    "QueueState",
    "QueueStats",
    "Receipt",
    "ReceiveRequest",
    "ReceiveResult",
    "SettleRequest",
    "backoff_ms",
    "check_queue",
]

QUEUE_ID_SIZE = 10
MAX_RECEIVE = 10_000
MAX_ENQUEUE = 100_000
MAX_PRIORITY = 2**31 - 1
_KEY = re.compile(r"[\x21-\x7e]{1,200}")
_MAX_MS = 2**62


class QueueState(enum.IntEnum):
    """Where a message is (see the module docstring)."""

    PENDING = 0
    SCHEDULED = 1
    READY = 2
    LEASED = 3
    ACKED = 4
    DEAD = 5
    MOVING = 6
    """Dead, being moved to the queue's dead-letter queue (counted as DEAD)."""

    @property
    def counted_as(self) -> QueueState:
        """The state whose counter holds it (the counter row has six)."""
        return QueueState.DEAD if self is QueueState.MOVING else self


def _int_property(properties: Mapping[str, str], name: str, default: int, low: int) -> int:
    text = properties.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError as exc:
        raise TmsInvalidArgumentError(f"queue property {name!r} must be an integer") from exc
    if not low <= value < 2**31:
        raise TmsInvalidArgumentError(f"queue property {name!r} must be in {low}..{2**31 - 1}")
    return value


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A queue's settings, from its topic's properties (all optional but ``kind``):

    ``lease_s`` (30) how long a receive leases a message by default (Vitess
    ``vt_ack_wait``); ``max_attempts`` (10) deliveries before a message is dead-lettered
    (0: never); ``backoff_s`` (1) and ``max_backoff_s`` (3600) the back-off after a
    failed attempt: ``backoff_s * 2**(attempt - 1)``, at most ``max_backoff_s``, less a
    random part of up to ``jitter_percent`` (20) percent; ``purge_after_s`` (86400)
    how long acked and dead-lettered messages are kept (Vitess ``vt_purge_after``);
    ``dead_letter_queue`` (none) a queue of the same namespace that dead messages move
    to (without it they stay here, dead, until purged).
    """

    lease_s: int = 30
    max_attempts: int = 10
    backoff_s: int = 1
    max_backoff_s: int = 3600
    jitter_percent: int = 20
    purge_after_s: int = 86_400
    dead_letter_queue: str | None = None
    """The name of a queue of the same namespace that dead messages move to."""

    KIND = "queue"

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> QueueConfig | None:
        """The settings of a queue topic; None for a topic that is not a queue. Raises
        ``TmsInvalidArgumentError`` for bad values (so a topic cannot be created with them)."""
        kind = properties.get("kind", "topic")
        if kind not in ("topic", cls.KIND):
            raise TmsInvalidArgumentError(
                f"the property 'kind' is 'topic' or 'queue', not {kind!r}"
            )
        if kind != cls.KIND:
            return None
        config = cls(
            lease_s=_int_property(properties, "lease_s", 30, 1),
            max_attempts=_int_property(properties, "max_attempts", 10, 0),
            backoff_s=_int_property(properties, "backoff_s", 1, 0),
            max_backoff_s=_int_property(properties, "max_backoff_s", 3600, 0),
            jitter_percent=_int_property(properties, "jitter_percent", 20, 0),
            purge_after_s=_int_property(properties, "purge_after_s", 86_400, 1),
            dead_letter_queue=_dead_letter_queue(properties),
        )
        if config.jitter_percent > 100:
            raise TmsInvalidArgumentError("queue property 'jitter_percent' must be in 0..100")
        return config


def _dead_letter_queue(properties: Mapping[str, str]) -> str | None:
    name = properties.get("dead_letter_queue")
    if name is None:
        return None
    TopicId("default", name)  # the name's syntax (TmsInvalidArgumentError)
    return name


def backoff_ms(config: QueueConfig, attempt: int, rng: random.Random) -> int:
    """How long a message waits after its ``attempt``-th delivery failed (lease expired,
    or nack without a delay): ``min(max_backoff_s, backoff_s * 2**(attempt-1))`` less up
    to ``jitter_percent`` of it, at random (so failed work does not come back in step)."""
    full = min(config.max_backoff_s * 1000, config.backoff_s * 1000 * 2 ** max(0, attempt - 1))
    return int(full - int(full * config.jitter_percent / 100 * rng.random()))


def _check_key(key: str | None) -> None:
    if key is not None and not (isinstance(key, str) and _KEY.fullmatch(key)):
        raise TmsInvalidArgumentError(
            "a message key is 1-200 printable ASCII characters without spaces"
        )


@dataclass(frozen=True, slots=True)
class EnqueueItem:
    """One message to enqueue: delivered not before ``at_ms`` (absolute, ms since the
    epoch) or, without it, ``delay_ms`` after the service receives it; lower
    ``priority`` first among due messages; ``key`` unique in the queue (enqueueing it
    again, until the first message is purged, returns the first message's id)."""

    payload: bytes
    key: str | None = None
    delay_ms: int = 0
    at_ms: int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload", bytes(self.payload))
        _check_key(self.key)
        for name, value in (("delay_ms", self.delay_ms), ("at_ms", self.at_ms)):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _MAX_MS
            ):
                raise TmsInvalidArgumentError(f"{name} must be a non-negative integer")
        if not isinstance(self.priority, int) or not 0 <= self.priority <= MAX_PRIORITY:
            raise TmsInvalidArgumentError(f"priority must be in 0..{MAX_PRIORITY}")

    def due_ms(self, now_ms: int) -> int:
        return self.at_ms if self.at_ms is not None else now_ms + self.delay_ms


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """Messages for one queue, all or none; with ``tx_write_pointer`` they stay PENDING
    until that transaction commits."""

    topic: TopicId
    items: Sequence[EnqueueItem]
    tx_write_pointer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        if not 0 < len(self.items) <= MAX_ENQUEUE:
            raise TmsInvalidArgumentError(f"between 1 and {MAX_ENQUEUE} messages per enqueue")
        if self.tx_write_pointer is not None and self.tx_write_pointer <= 0:
            raise TmsInvalidArgumentError(f"bad transaction write pointer {self.tx_write_pointer}")
        keys = [item.key for item in self.items if item.key is not None]
        if len(keys) != len(set(keys)):
            raise TmsInvalidArgumentError("a key appears twice in one enqueue")


@dataclass(frozen=True, slots=True)
class Enqueued:
    """Where an item went: its id; ``duplicate`` if its key was already in the queue."""

    id: bytes
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class Receipt:
    """A delivery: the message id and the attempt it was delivered with."""

    id: bytes
    attempt: int

    def __post_init__(self) -> None:
        if not isinstance(self.id, bytes) or len(self.id) != QUEUE_ID_SIZE:
            raise TmsInvalidArgumentError(f"a queue message id is {QUEUE_ID_SIZE} bytes")
        if not isinstance(self.attempt, int) or not 0 < self.attempt < 2**31:
            raise TmsInvalidArgumentError("an attempt is a positive integer")

    def __str__(self) -> str:
        return f"{self.id.hex()}.{self.attempt}"

    @classmethod
    def parse(cls, text: str) -> Receipt:
        """``<id hex>.<attempt>``, as ``str`` writes it."""
        id_hex, _, attempt = str(text).partition(".")
        try:
            return cls(bytes.fromhex(id_hex), int(attempt))
        except ValueError as exc:
            raise TmsInvalidArgumentError(f"not a receipt: {text!r}") from exc


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    """Lease up to ``max_messages`` due messages for ``lease_ms`` (None: the queue's
    ``lease_s``)."""

    topic: TopicId
    max_messages: int = 1
    lease_ms: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_messages, int) or not 0 < self.max_messages <= MAX_RECEIVE:
            raise TmsInvalidArgumentError(f"max must be in 1..{MAX_RECEIVE}")
        if self.lease_ms is not None and not 0 < self.lease_ms <= 2**31:
            raise TmsInvalidArgumentError("a lease is 1 ms to about 24 days")


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """A delivered (or inspected) message."""

    id: bytes
    payload: bytes
    attempt: int
    enqueued_ms: int
    due_ms: int
    priority: int
    lease_expires_ms: int
    key: str | None = None

    @property
    def receipt(self) -> Receipt:
        return Receipt(self.id, self.attempt)


@dataclass(frozen=True, slots=True)
class ReceiveResult:
    """The leased messages; ``next_due_ms`` (when none was leased): when a message may
    next become ready (the earliest scheduled message or lease expiry known), for a
    receiver that waits."""

    messages: tuple[QueueMessage, ...]
    next_due_ms: int | None = None


class AckOutcome(enum.Enum):
    """What an ack or nack did to one receipt."""

    ACKED = "acked"
    """Acked now (an ack), or already acked earlier (an ack or a nack)."""
    PENDING = "pending"
    """Acked when the transaction commits."""
    RETURNED = "returned"
    """Returned to the queue (a nack)."""
    DEAD = "dead"
    """Dead-lettered (a nack of the last attempt)."""
    LEASE_LOST = "lease_lost"
    """Another attempt holds or held the message: this receipt can no longer finish it."""
    UNKNOWN = "unknown"
    """No such message (never enqueued, purged, or its enqueue not committed)."""


def _receipts(receipts: Sequence[Receipt]) -> tuple[Receipt, ...]:
    out = tuple(receipts)
    if not 0 < len(out) <= MAX_ENQUEUE:
        raise TmsInvalidArgumentError(f"between 1 and {MAX_ENQUEUE} receipts")
    if len({r.id for r in out}) != len(out):
        raise TmsInvalidArgumentError("a message appears twice in one request")
    return out


@dataclass(frozen=True, slots=True)
class AckRequest:
    """Finish deliveries; with ``tx_write_pointer`` only if that transaction commits."""

    topic: TopicId
    receipts: Sequence[Receipt]
    tx_write_pointer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "receipts", _receipts(self.receipts))
        if self.tx_write_pointer is not None and self.tx_write_pointer <= 0:
            raise TmsInvalidArgumentError(f"bad transaction write pointer {self.tx_write_pointer}")


@dataclass(frozen=True, slots=True)
class NackRequest:
    """Return deliveries to the queue, due ``delay_ms`` from now (None: the back-off)."""

    topic: TopicId
    receipts: Sequence[Receipt]
    delay_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "receipts", _receipts(self.receipts))
        if self.delay_ms is not None and not 0 <= self.delay_ms < _MAX_MS:
            raise TmsInvalidArgumentError("delay_ms must be a non-negative integer")


@dataclass(frozen=True, slots=True)
class SettleRequest:
    """The outcome of a transaction for its queue writes: ``commit`` makes its enqueues
    deliverable and its acks final; otherwise its enqueues are dropped and its acks
    undone."""

    topic: TopicId
    tx_write_pointer: int
    commit: bool

    def __post_init__(self) -> None:
        if self.tx_write_pointer <= 0:
            raise TmsInvalidArgumentError(f"bad transaction write pointer {self.tx_write_pointer}")


@dataclass(frozen=True, slots=True)
class QueueStats:
    """How many messages are in each state (``pending``: enqueued by transactions not
    yet committed; ``leased`` includes those with a transactional ack pending), and
    when the longest-waiting ready message became due (None if none is)."""

    pending: int
    scheduled: int
    ready: int
    leased: int
    acked: int
    dead: int
    oldest_ready_ms: int | None


def check_queue(config: QueueConfig | None, topic: object) -> QueueConfig:
    """The topic's queue settings; 400 if it is not a queue."""
    if config is None:
        raise TmsInvalidArgumentError(f"{topic} is not a queue (its 'kind' is not 'queue')")
    return config
