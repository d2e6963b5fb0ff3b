"""Reading a topic: the design's fetch algorithm.

Start position, in order of precedence:

* a message id (inclusive or exclusive). An id that points into the payload table resumes
  inside that commit marker's payloads; an id older than the TTL bound becomes a start at
  the bound;
* a timestamp (every message of that millisecond included), never earlier than the TTL
  bound;
* otherwise the oldest live message.

Rows pass through the transactional filter (the rules of ``tms.filter``, inlined here):
ACCEPT, SKIP, or HOLD, which ends the read there (``held`` becomes True). Payload-table
references expand, in order, to the rows stored under the reference's write pointer,
using the pointer's absolute value, so a non-transactional reader expands rolled-back
references too. ``limit`` counts messages returned. Expired messages are skipped: older
than the topic TTL, or past their own (shorter) TTL; payload rows older than the topic
TTL are skipped too, since cleanup may remove them at any moment.

Two CDAP quirks are not copied: an exclusive start skips only the row at the start
position (CDAP's payload scan skips its first row whatever it is), and a payload position
is resumed only in the reference at the start position.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tms.codec import keys
from tms.codec.values import decode_message_value, decode_payload_value
from tms.errors import TmsInvalidArgumentError
from tms.ids import MessageId
from tms.model import Message, TopicBounds, TopicMetadata
from tms.store.tables import Tables
from txn.transaction import Transaction

__all__ = ["FetchRequest", "MessageFetcher", "scan_bounds"]

_MAX_LIMIT = 2**31 - 1
_NO_PAYLOAD_POSITION = bytes(10)  # write_ms = 0, p_seq = 0: an inline message


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Where to start and how much to read. Set at most one of ``start_id`` and
    ``start_ms``; ``limit`` > 0; ``transaction`` None reads everything."""

    start_id: MessageId | None = None
    inclusive: bool = True
    start_ms: int | None = None
    limit: int = _MAX_LIMIT
    transaction: Transaction | None = None

    def __post_init__(self) -> None:
        if self.start_id is not None and self.start_ms is not None:
            raise TmsInvalidArgumentError("start from a message id or a time, not both")
        if self.start_ms is not None and self.start_ms < 0:
            raise TmsInvalidArgumentError(f"start time must not be negative, got {self.start_ms}")
        if not 0 < self.limit <= _MAX_LIMIT:
            raise TmsInvalidArgumentError(f"limit must be in 1..{_MAX_LIMIT}, got {self.limit}")


def _start(request: FetchRequest, smallest: int) -> tuple[tuple[int, int], bool, MessageId | None]:
    """(position, skip the row at it, payload id to resume at) of a read."""
    start = request.start_id
    if start is None or start.publish_ms < smallest:
        begin = (
            smallest
            if start is not None or request.start_ms is None
            else max(smallest, request.start_ms)
        )
        return (begin, 0), False, None
    skip_start = not request.inclusive and not start.is_payload_message
    return (start.publish_ms, start.seq), skip_start, start if start.is_payload_message else None


def scan_bounds(
    tables: Tables, metadata: TopicMetadata, request: FetchRequest, now_ms: int
) -> TopicBounds:
    """The ``TopicBounds`` of ``request``. Reads message rows only (no payloads), with the
    fetch's start rules and transactional filter; with a ``limit`` (anything below the
    maximum) it also counts the messages such a read would return (a commit marker counts
    its payload rows; per-message TTLs are not applied) and stops at the limit, where
    ``after_limit`` is the id of the entry or payload row right after the last message
    counted."""
    prefix = keys.topic_prefix(metadata.topic, metadata.generation)
    smallest = max(0, now_ms - metadata.ttl_s * 1000)
    tx = request.transaction
    position, skip_start, payload_start = _start(request, smallest)
    start_key = keys.message_key(prefix, *position)
    counting = request.limit < _MAX_LIMIT
    budget = request.limit
    first = last_key = None
    for key, value in tables.messages.rows(prefix, position):
        if skip_start and key == start_key:
            continue
        head = value[0]
        if head == 0:
            ptr = None
        elif head <= 2:  # the common kinds, decoded inline as the fetcher does
            ptr = int.from_bytes(value[1:9], "big", signed=True)
        else:
            ptr = decode_message_value(value).tx_write_pointer
        skipped = False
        if tx is not None and ptr is not None:
            if ptr > 0 and not tx.is_visible(ptr) and not tx.is_invalid(ptr):
                held = keys.decode_message_key(key)[1:]
                return _bounds(first, last_key, held, request.limit - budget if counting else None)
            skipped = ptr < 0 or not tx.is_visible(ptr)
        if counting and not skipped and budget == 0:
            after = MessageId(*keys.decode_message_key(key)[1:])
            return _bounds(first, last_key, None, request.limit, after)
        if first is None:
            first = keys.decode_message_key(key)[1:]
        if counting and not skipped:
            if head == 2 or (head > 2 and decode_message_value(value).payload is None):
                assert ptr is not None
                resume = payload_start if key == start_key else None
                p_from = (resume.write_ms, resume.p_seq) if resume is not None else (0, 0)
                p_inclusive = request.inclusive or resume is None
                p_start = keys.payload_key(prefix, abs(ptr), *p_from)
                for p_key, _ in tables.payloads.rows(prefix, abs(ptr), p_from):
                    if not p_inclusive and p_key == p_start:
                        continue
                    if budget == 0:
                        p_position = keys.decode_payload_key(p_key)[2:]
                        after = MessageId(*keys.decode_message_key(key)[1:], *p_position)
                        return _bounds(first, key, None, request.limit, after)
                    budget -= 1
            else:
                budget -= 1
        last_key = key
    return _bounds(first, last_key, None, request.limit - budget if counting else None)


def _bounds(
    first: tuple[int, int] | None,
    last_key: bytes | None,
    held: tuple[int, int] | None,
    counted: int | None,
    after_limit: MessageId | None = None,
) -> TopicBounds:
    return TopicBounds(first, _position(last_key), held, counted, after_limit)


def _position(key: bytes | None) -> tuple[int, int] | None:
    return keys.decode_message_key(key)[1:] if key is not None else None


class MessageFetcher:
    """Iterate the messages of one read; ``held`` tells whether it stopped at an
    entry of a transaction the reader cannot see yet."""

    def __init__(
        self, tables: Tables, metadata: TopicMetadata, request: FetchRequest, now_ms: int
    ) -> None:
        self._tables = tables
        self._metadata = metadata
        self._request = request
        self._now = now_ms
        self.held = False
        self.scanned = 0

    def __iter__(self) -> Iterator[Message]:
        # The hot loop of every read: rows are decoded inline from the raw scan (the common
        # value kinds without a TTL take a few byte operations); ids are built as bytes.
        tables, request, now = self._tables, self._request, self._now
        prefix = keys.topic_prefix(self._metadata.topic, self._metadata.generation)
        topic_ttl_ms = self._metadata.ttl_s * 1000
        smallest = max(0, now - topic_ttl_ms)
        tx = request.transaction
        position, skip_start, payload_start = _start(request, smallest)
        start_key = keys.message_key(prefix, *position)

        remaining = request.limit
        for key, value in tables.messages.rows(prefix, position):
            self.scanned += 1
            at_start = key == start_key
            if at_start and skip_start:
                continue
            head = value[0]
            ttl: int | None = None
            if head == 0:
                ptr, payload = None, value[1:]
            elif head == 1:
                ptr, payload = int.from_bytes(value[1:9], "big", signed=True), value[9:]
            elif head == 2:
                ptr, payload = int.from_bytes(value[1:9], "big", signed=True), None
            else:
                entry = decode_message_value(value)
                ptr, payload, ttl = entry.tx_write_pointer, entry.payload, entry.ttl_s
            if tx is not None and ptr is not None:
                if ptr < 0:
                    continue  # rolled back (or negated by cleanup): SKIP
                if not tx.is_visible(ptr):
                    if tx.is_invalid(ptr):
                        continue  # SKIP
                    self.held = True  # in progress or newer: HOLD ends the read
                    return
            position_bytes = key[-10:]
            if ttl is not None:
                publish_ms = int.from_bytes(position_bytes[:8], "big")
                if publish_ms + min(ttl * 1000, topic_ttl_ms) <= now:
                    continue
            if payload is not None:
                yield Message((position_bytes + _NO_PAYLOAD_POSITION, payload))
                remaining -= 1
                if remaining == 0:
                    return
                continue
            assert ptr is not None
            if at_start and payload_start is not None:
                p_from, p_inclusive = (
                    (payload_start.write_ms, payload_start.p_seq),
                    request.inclusive,
                )
            else:
                p_from, p_inclusive = (0, 0), True
            p_start = keys.payload_key(prefix, abs(ptr), *p_from)
            for p_key, p_value in tables.payloads.rows(prefix, abs(ptr), p_from):
                if not p_inclusive and p_key == p_start:
                    continue
                p_position = p_key[-10:]
                write_ms = int.from_bytes(p_position[:8], "big")
                if write_ms < smallest:
                    continue
                if p_value[0] == 0:
                    p_payload = p_value[1:]
                else:
                    p_payload, p_ttl = decode_payload_value(p_value)
                    if p_ttl is not None and write_ms + min(p_ttl * 1000, topic_ttl_ms) <= now:
                        continue
                yield Message((position_bytes + p_position, p_payload))
                remaining -= 1
                if remaining == 0:
                    return
