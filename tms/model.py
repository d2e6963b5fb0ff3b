"""Value objects of the messaging core: topics, requests, messages, rollback ranges."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from tms.errors import TmsInvalidArgumentError
from tms.ids import MessageId

__all__ = [
    "DEFAULT_TTL_S",
    "MAX_MARKERS",
    "MAX_NAME_LENGTH",
    "MarkersRequest",
    "MarkersResult",
    "Message",
    "RollbackDetail",
    "StoreRequest",
    "TopicBounds",
    "TopicId",
    "TopicMetadata",
]

DEFAULT_TTL_S = 7 * 24 * 3600
MAX_NAME_LENGTH = 255
_NAMESPACE = re.compile(r"[a-zA-Z0-9_]+")
_TOPIC = re.compile(r"[a-zA-Z0-9_-]+")
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")
MAX_MARKERS = 10_000


@dataclass(frozen=True, slots=True, order=True)
class TopicId:
    """``namespace`` matches ``[a-zA-Z0-9_]+``, ``topic`` ``[a-zA-Z0-9_-]+`` (the design's
    rules; neither can contain ``:``, the key separator), each at most 255 characters."""

    namespace: str
    topic: str

    def __post_init__(self) -> None:
        validate_namespace(self.namespace)
        if not isinstance(self.topic, str) or not _TOPIC.fullmatch(self.topic):
            raise TmsInvalidArgumentError(
                f"Invalid topic ID: {self.topic!r}. "
                "Should only contain alphanumeric characters and _ or -."
            )
        if len(self.topic) > MAX_NAME_LENGTH:
            raise TmsInvalidArgumentError(f"topic name longer than {MAX_NAME_LENGTH} characters")

    def __str__(self) -> str:
        return f"{self.namespace}:{self.topic}"


def validate_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise TmsInvalidArgumentError(
            f"Invalid namespace: {namespace!r}. Should only contain alphanumeric characters and _."
        )
    if len(namespace) > MAX_NAME_LENGTH:
        raise TmsInvalidArgumentError(f"namespace longer than {MAX_NAME_LENGTH} characters")
    return namespace


def _parse_int(properties: Mapping[str, str], key: str) -> int:
    value = properties[key]
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise TmsInvalidArgumentError(
            f"topic property {key!r} must be an integer, got {value!r}"
        ) from exc


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic's properties. ``generation`` > 0: the topic exists; < 0: deleted (its data,
    of generation ``-generation`` and older, awaits cleanup). ``ttl_s`` > 0."""

    topic: TopicId
    properties: Mapping[str, str] = field(compare=True)

    def __post_init__(self) -> None:
        props = dict(self.properties)
        for key, value in props.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TmsInvalidArgumentError("topic properties must map strings to strings")
        props.setdefault("ttl", str(DEFAULT_TTL_S))
        props.setdefault("generation", "1")
        if _parse_int(props, "ttl") <= 0:
            raise TmsInvalidArgumentError(
                f"topic property 'ttl' must be positive, got {props['ttl']!r}"
            )
        generation = _parse_int(props, "generation")
        if generation == 0 or not -(2**31) < generation < 2**31:
            raise TmsInvalidArgumentError(f"bad topic generation {generation}")
        if _parse_int(props, "ttl") >= 2**31:
            raise TmsInvalidArgumentError("topic property 'ttl' must fit in 32 bits")
        object.__setattr__(self, "properties", MappingProxyType(dict(sorted(props.items()))))

    @property
    def generation(self) -> int:
        return int(self.properties["generation"])

    @property
    def ttl_s(self) -> int:
        return int(self.properties["ttl"])

    @property
    def exists(self) -> bool:
        return self.generation > 0

    def with_generation(self, generation: int) -> TopicMetadata:
        return TopicMetadata(self.topic, {**self.properties, "generation": str(generation)})

    def user_properties(self) -> dict[str, str]:
        """The properties without ``generation``."""
        return {k: v for k, v in self.properties.items() if k != "generation"}


@dataclass(frozen=True, slots=True)
class StoreRequest:
    """Messages to publish (or store) in one topic, all or none.

    ``ttls``, when given, has one entry per payload: a per-message TTL in seconds (None
    for the topic's). A non-transactional request must carry payloads; an empty
    transactional one is the commit marker that references the payload table.
    """

    topic: TopicId
    payloads: Sequence[bytes]
    tx_write_pointer: int | None = None
    ttls: Sequence[int | None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "payloads", tuple(bytes(p) for p in self.payloads))
        if self.ttls is not None:
            ttls = tuple(self.ttls)
            if len(ttls) != len(self.payloads):
                raise TmsInvalidArgumentError("one ttl per message is needed")
            for ttl in ttls:
                if ttl is not None and (not isinstance(ttl, int) or ttl <= 0 or ttl >= 2**31):
                    raise TmsInvalidArgumentError(
                        f"a message ttl must be a positive 32-bit integer, got {ttl!r}"
                    )
            object.__setattr__(self, "ttls", ttls)
        if self.tx_write_pointer is not None and self.tx_write_pointer <= 0:
            raise TmsInvalidArgumentError(f"bad transaction write pointer {self.tx_write_pointer}")

    @property
    def transactional(self) -> bool:
        return self.tx_write_pointer is not None

    def ttl_of(self, index: int) -> int | None:
        return self.ttls[index] if self.ttls is not None else None

    @classmethod
    def of(
        cls, topic: TopicId, payloads: Iterable[bytes | str], tx_write_pointer: int | None = None
    ) -> StoreRequest:
        """Strings are encoded as UTF-8."""
        data = [p.encode() if isinstance(p, str) else p for p in payloads]
        return cls(topic, data, tx_write_pointer)


@dataclass(frozen=True, slots=True)
class RollbackDetail:
    """Where a transactional publish landed: entries from (start_ms, start_seq) to
    (end_ms, end_seq), inclusive, written with ``tx_write_pointer``."""

    tx_write_pointer: int
    start_ms: int
    start_seq: int
    end_ms: int
    end_seq: int

    def __post_init__(self) -> None:
        if (self.start_ms, self.start_seq) > (self.end_ms, self.end_seq):
            raise TmsInvalidArgumentError("rollback range ends before it starts")
        for seq in (self.start_seq, self.end_seq):
            if not 0 <= seq <= 0xFFFF:
                raise TmsInvalidArgumentError(f"bad sequence number {seq}")
        if self.tx_write_pointer <= 0 or self.start_ms < 0:
            raise TmsInvalidArgumentError("bad rollback detail")


class Message(tuple[bytes, bytes]):
    """A consumed message: ``(id_bytes, payload)``, the 20-byte id and the payload.

    A plain tuple subclass, built as ``Message((id_bytes, payload))`` in C by the million
    in the fetch loop; the id decodes on demand.
    """

    __slots__ = ()

    @property
    def id_bytes(self) -> bytes:
        return self[0]

    @property
    def payload(self) -> bytes:
        return self[1]

    @property
    def id(self) -> MessageId:
        return MessageId.from_bytes(self[0])

    @property
    def id_hex(self) -> str:
        return self[0].hex()

    @property
    def publish_ms(self) -> int:
        return int.from_bytes(self[0][:8], "big")

    def __repr__(self) -> str:
        return f"Message(id={self[0].hex()}, payload={self[1]!r})"


@dataclass(frozen=True, slots=True)
class MarkersRequest:
    """Commit markers for several write pointers of one topic, written at once: all or
    none, next to each other, in the given order (a repeated pointer counts once).

    With ``idempotency_key`` (1-200 printable ASCII characters), the request takes
    effect at most once per topic generation: repeating it (within the topic's TTL)
    returns the first outcome, marked ``duplicate``."""

    topic: TopicId
    write_pointers: tuple[int, ...]
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        pointers = tuple(dict.fromkeys(self.write_pointers))
        if not pointers or len(pointers) > MAX_MARKERS:
            raise TmsInvalidArgumentError(f"between 1 and {MAX_MARKERS} write pointers needed")
        for wp in pointers:
            if not isinstance(wp, int) or isinstance(wp, bool) or not 0 < wp < 2**63:
                raise TmsInvalidArgumentError(f"bad transaction write pointer {wp!r}")
        key = self.idempotency_key
        if key is not None and not (isinstance(key, str) and _IDEMPOTENCY_KEY.fullmatch(key)):
            raise TmsInvalidArgumentError(
                "an idempotency key is 1-200 printable ASCII characters without spaces"
            )
        object.__setattr__(self, "write_pointers", pointers)


@dataclass(frozen=True, slots=True)
class MarkersResult:
    """Where each marker of a ``MarkersRequest`` landed (its rollback range), in order;
    ``duplicate``: an earlier request with the same idempotency key wrote them."""

    details: tuple[RollbackDetail, ...]
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class TopicBounds:
    """What a read from a start position would pass over, in message-table positions
    (``(publish_ms, seq)``): ``first`` and ``last`` entry it would pass (accepted or
    skipped), and ``held``, the entry where a transactional read stops, if any (``last``
    is then the entry before it). Nones when there is no such entry. With a limit the
    read stops there: ``last`` is then the entry the limit falls in or ends."""

    first: tuple[int, int] | None
    last: tuple[int, int] | None
    held: tuple[int, int] | None
    counted: int | None = None
    """With a limit: how many messages a read with it would return."""
    after_limit: MessageId | None = None
    """With a limit that was reached: where a read resumes past it (the id of the entry,
    or staged row of a commit marker, right after the last message counted)."""
