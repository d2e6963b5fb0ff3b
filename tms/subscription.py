"""Subscriptions: named consumers of a topic whose position the service keeps (value
objects, pure).

A subscription is (namespace, topic, name). As Hedwig's subscription data, it has
**preferences**, set by its owner and rarely changed, apart from its **state**, which
changes as it consumes:

* ``Preferences``: where it starts (``Start``: earliest, latest, a time, a message id),
  whether it reads transactionally (committed messages only, stopping at the first
  uncommitted one), and an optional server-side ``PayloadFilter``;
* ``SubscriptionState``: ``position``, the id of the next entry to read (everything
  before it is consumed: an inclusive start); ``generation``, the topic generation it
  belongs to; ``stamp``, a fresh random number at every *non-transactional* move of the
  position (create, commit, seek, reset), which transactional positions record so that
  those written before the move are superseded by it (``tms.positions``); and
  ``updated_ms``.

Positions are message ids (``tms.ids``): ``EARLIEST`` (the zero id) comes before every
entry; ``after(id)`` is the position right after a consumed message, ``after_entry(ms,
seq)`` right after a whole message-table entry (a commit marker with all its payloads).
Ids of new entries are always above the last entry's (DESIGN_NOTES 1), so a position
after the last entry never skips one written later.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from tms.errors import TmsInvalidArgumentError
from tms.ids import MessageId
from tms.model import MAX_NAME_LENGTH, TopicId

__all__ = [
    "EARLIEST",
    "MAX_FILTER_PREFIXES",
    "MAX_PREFIX_BYTES",
    "Lag",
    "PayloadFilter",
    "Preferences",
    "Start",
    "StartKind",
    "Subscription",
    "SubscriptionData",
    "SubscriptionId",
    "SubscriptionState",
    "Versioned",
    "after",
    "after_entry",
]

_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_MAX_SEQ = 0xFFFF
_MAX_MS = 2**63 - 1
MAX_FILTER_PREFIXES = 100
MAX_PREFIX_BYTES = 1024

EARLIEST = MessageId(0, 0)
"""The position before every entry."""


def after_entry(publish_ms: int, seq: int) -> MessageId:
    """The position right after the message-table entry at (publish_ms, seq)."""
    if seq >= _MAX_SEQ:
        return MessageId(publish_ms + 1, 0)
    return MessageId(publish_ms, seq + 1)


def after(message_id: MessageId) -> MessageId:
    """The position right after a consumed message: after its entry for an inline one,
    after its payload row (inside the same commit marker) for one in the payload table."""
    if not message_id.is_payload_message:
        return after_entry(message_id.publish_ms, message_id.seq)
    if message_id.p_seq >= _MAX_SEQ:
        return MessageId(message_id.publish_ms, message_id.seq, message_id.write_ms + 1, 0)
    return MessageId(
        message_id.publish_ms, message_id.seq, message_id.write_ms, message_id.p_seq + 1
    )


@dataclass(frozen=True, slots=True, order=True)
class SubscriptionId:
    """``name`` matches ``[a-zA-Z0-9_-]+`` (as topic names), at most 255 characters."""

    topic: TopicId
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise TmsInvalidArgumentError(
                f"Invalid subscription name: {self.name!r}. "
                "Should only contain alphanumeric characters and _ or -."
            )
        if len(self.name) > MAX_NAME_LENGTH:
            raise TmsInvalidArgumentError(
                f"subscription name longer than {MAX_NAME_LENGTH} characters"
            )

    def __str__(self) -> str:
        return f"{self.topic}:{self.name}"


class StartKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIME = "time"
    ID = "id"


@dataclass(frozen=True, slots=True)
class Start:
    """Where a subscription starts (or a seek goes): the oldest live message, after the
    newest one, the first message published at or after ``time_ms``, or ``message_id``
    (inclusive). Use the class methods."""

    kind: StartKind
    time_ms: int | None = None
    message_id: MessageId | None = None

    def __post_init__(self) -> None:
        if (self.kind is StartKind.TIME) != (self.time_ms is not None):
            raise TmsInvalidArgumentError("a start at a time needs the time, and only it")
        if (self.kind is StartKind.ID) != (self.message_id is not None):
            raise TmsInvalidArgumentError("a start at a message id needs the id, and only it")
        if self.time_ms is not None and not 0 <= self.time_ms < _MAX_MS:
            raise TmsInvalidArgumentError(f"bad start time {self.time_ms}")

    @classmethod
    def earliest(cls) -> Start:
        return cls(StartKind.EARLIEST)

    @classmethod
    def latest(cls) -> Start:
        return cls(StartKind.LATEST)

    @classmethod
    def at_time(cls, time_ms: int) -> Start:
        return cls(StartKind.TIME, time_ms=time_ms)

    @classmethod
    def at_id(cls, message_id: MessageId) -> Start:
        return cls(StartKind.ID, message_id=message_id)


@dataclass(frozen=True, slots=True)
class PayloadFilter:
    """Deliver only messages whose payload starts with one of ``prefixes`` (1-100
    prefixes of 1-1,024 bytes). Messages it rejects are passed over: the position moves
    past them."""

    prefixes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        prefixes = tuple(bytes(p) for p in self.prefixes)
        if not 0 < len(prefixes) <= MAX_FILTER_PREFIXES:
            raise TmsInvalidArgumentError(
                f"a payload filter has 1 to {MAX_FILTER_PREFIXES} prefixes"
            )
        if not all(0 < len(p) <= MAX_PREFIX_BYTES for p in prefixes):
            raise TmsInvalidArgumentError(f"a payload prefix has 1 to {MAX_PREFIX_BYTES} bytes")
        object.__setattr__(self, "prefixes", prefixes)

    def matches(self, payload: bytes) -> bool:
        return payload.startswith(self.prefixes)


@dataclass(frozen=True, slots=True)
class Preferences:
    """What the owner chose (see the module docstring). ``start`` applies when the
    subscription is created; afterwards only a seek moves the position."""

    start: Start = field(default_factory=Start.earliest)
    transactional: bool = False
    filter: PayloadFilter | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionState:
    """See the module docstring. ``generation`` > 0, ``stamp`` in 0..2**63-1."""

    position: MessageId
    generation: int
    stamp: int
    updated_ms: int

    def __post_init__(self) -> None:
        if self.generation <= 0 or not 0 <= self.stamp < 2**63 or self.updated_ms < 0:
            raise TmsInvalidArgumentError("bad subscription state")


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One subscription's record in the metadata store: preferences and state."""

    preferences: Preferences
    state: SubscriptionState


@dataclass(frozen=True, slots=True)
class Versioned:
    """A record with the version the metadata store gave it (> 0)."""

    data: SubscriptionData
    version: int


@dataclass(frozen=True, slots=True)
class Lag:
    """How many messages lie between a position and the end of its topic (``tms.lag``):
    counted when ``exact``, else estimated."""

    messages: int
    exact: bool


@dataclass(frozen=True, slots=True)
class Subscription:
    """A subscription as the service answers for it: its record (``data``, ``version``)
    and where its next read starts, ``position`` — the stored one, or the newest
    committed transactional position (``tms.positions``), then ``committed_by`` is that
    transaction's write pointer — with the time it last moved and, when asked, its
    ``lag``."""

    id: SubscriptionId
    data: SubscriptionData
    version: int
    position: MessageId
    committed_by: int | None
    updated_ms: int
    lag: Lag | None = None

    @property
    def preferences(self) -> Preferences:
        return self.data.preferences

    @property
    def state(self) -> SubscriptionState:
        return self.data.state
