"""Reading a topic: the design's fetch algorithm.

Start position, in order of precedence:

* a message id (inclusive or exclusive). An id that points into the payload table resumes
  inside that commit marker's payloads; an id older than the TTL bound becomes a start at
  the bound;
* a timestamp (every message of that millisecond included), never earlier than the TTL
  bound;
* otherwise the oldest live message.

Transactional entries pass through the reader's filter (``tms.filter.accept``): ACCEPT,
SKIP, or HOLD, which ends the read there (``held`` becomes True). Payload-table
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
from tms.codec.avro import ConsumeSpec
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.filter import FilterResult, accept
from tms.ids import INLINE_PAYLOAD_POSITION, MESSAGE_ID_SIZE, MessageId
from tms.model import Message, TopicBounds, TopicMetadata
from tms.store.tables import Tables
from txn.codec import decode_transaction
from txn.errors import CodecError as TxCodecError
from txn.transaction import Transaction

__all__ = ["FetchRequest", "MessageFetcher", "fetch_request_of", "scan_bounds"]

_MAX_LIMIT = 2**31 - 1
_SKIP, _HOLD = FilterResult.SKIP, FilterResult.HOLD


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


def fetch_request_of(spec: ConsumeSpec) -> FetchRequest:
    """The read a ConsumeRequest asks for (``limit`` None: no limit);
    ``TmsInvalidArgumentError`` / ``TmsCodecError`` for one that makes no sense."""
    limit = spec.limit if spec.limit is not None else _MAX_LIMIT
    if limit <= 0:
        raise TmsInvalidArgumentError(f"limit must be positive, got {limit}")
    start_id = start_ms = None
    if isinstance(spec.start_from, bytes):
        if len(spec.start_from) != MESSAGE_ID_SIZE:
            raise TmsInvalidArgumentError(f"startFrom must be a {MESSAGE_ID_SIZE}-byte message id")
        start_id = MessageId.from_bytes(spec.start_from)
    elif spec.start_from is not None:
        start_ms = spec.start_from
    tx = None
    if spec.transaction is not None:
        try:
            tx = decode_transaction(spec.transaction)
        except TxCodecError as exc:
            raise TmsCodecError(f"the transaction does not decode: {exc}") from exc
    return FetchRequest(start_id, spec.inclusive, start_ms, limit, tx)


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
    tables: Tables,
    metadata: TopicMetadata,
    request: FetchRequest,
    now_ms: int,
    *,
    stop: tuple[int, int] | None = None,
) -> TopicBounds:
    """The ``TopicBounds`` of ``request``. Reads message rows (payload rows only to count
    them), with the fetch's start rules and transactional filter; with ``stop``, only the
    entries before that (publish_ms, seq). With a ``limit`` (anything below the maximum) it
    also counts the messages such a read would return (a commit marker counts its payload
    rows; per-message TTLs are not applied) and stops at the limit, where ``after_limit`` is
    the id of the entry or payload row right after the last message counted."""
    prefix = keys.topic_prefix(metadata.topic, metadata.generation)
    smallest = max(0, now_ms - metadata.ttl_s * 1000)
    tx = request.transaction
    position, skip_start, payload_start = _start(request, smallest)
    start = keys.pack_position(*position)
    end = keys.pack_position(*stop) if stop is not None else None
    counting = request.limit < _MAX_LIMIT
    budget = request.limit
    first = last = None
    for chunk in tables.messages.entries(prefix, position):
        for at, ptr, payload, _ttl in chunk:
            at_start = at == start
            if skip_start and at_start:
                continue
            if end is not None and at >= end:
                return _bounds(first, last, None, request.limit - budget if counting else None)
            skipped = False
            if tx is not None and ptr is not None:
                verdict = accept(tx, ptr)
                if verdict is _HOLD:
                    counted = request.limit - budget if counting else None
                    return _bounds(first, last, keys.decode_position(at), counted)
                skipped = verdict is _SKIP
            if counting and not skipped and budget == 0:
                after = MessageId(*keys.decode_position(at))
                return _bounds(first, last, None, request.limit, after)
            if first is None:
                first = at
            if counting and not skipped:
                if payload is not None:
                    budget -= 1
                else:
                    assert ptr is not None
                    resume = payload_start if at_start else None
                    p_from = (resume.write_ms, resume.p_seq) if resume is not None else (0, 0)
                    p_inclusive = request.inclusive or resume is None
                    p_start = keys.pack_position(*p_from)
                    for p_chunk in tables.payloads.entries(prefix, abs(ptr), p_from):
                        for p_at, _write_ms, _p_payload, _p_ttl in p_chunk:
                            if not p_inclusive and p_at == p_start:
                                continue
                            if budget == 0:
                                after = MessageId.from_bytes(at + p_at)
                                return _bounds(first, at, None, request.limit, after)
                            budget -= 1
            last = at
    return _bounds(first, last, None, request.limit - budget if counting else None)


def _bounds(
    first: bytes | None,
    last: bytes | None,
    held: tuple[int, int] | None,
    counted: int | None,
    after_limit: MessageId | None = None,
) -> TopicBounds:
    return TopicBounds(_decoded(first), _decoded(last), held, counted, after_limit)


def _decoded(position: bytes | None) -> tuple[int, int] | None:
    return keys.decode_position(position) if position is not None else None


class MessageFetcher:
    """Iterate the messages of one read; ``held`` tells whether it stopped at an
    entry of a transaction the reader cannot see yet (then ``held_at`` is that entry's
    (publish_ms, seq) and ``held_pointer`` its write pointer). Once the iteration ended
    by itself (not held, limit not reached), ``end`` is the (publish_ms, seq) of the last
    entry it passed over, None if there was none. With ``most_rows``, the iteration stops
    early once it has passed more rows than that (skipped ones too: entries of invisible
    transactions, expired messages), and ``cut`` is then True: a bound on the work of a
    read that must stay short (on an event loop's thread), checked a chunk of rows at a
    time."""

    def __init__(
        self,
        tables: Tables,
        metadata: TopicMetadata,
        request: FetchRequest,
        now_ms: int,
        most_rows: int | None = None,
    ) -> None:
        self._tables = tables
        self._metadata = metadata
        self._request = request
        self._now = now_ms
        self._most_rows = most_rows
        self.cut = False
        self.held = False
        self.held_at: tuple[int, int] | None = None
        self.held_pointer: int | None = None
        self.end: tuple[int, int] | None = None

    def __iter__(self) -> Iterator[Message]:
        # The hot loop of every read: rows come decoded in bulk from the codec (the common
        # kinds inline there); ids are built as bytes from the rows' positions.
        tables, request, now = self._tables, self._request, self._now
        prefix = keys.topic_prefix(self._metadata.topic, self._metadata.generation)
        topic_ttl_ms = self._metadata.ttl_s * 1000
        smallest = max(0, now - topic_ttl_ms)
        tx = request.transaction
        position, skip_start, payload_start = _start(request, smallest)
        start = keys.pack_position(*position)

        remaining = request.limit
        rows_left = -1 if self._most_rows is None else self._most_rows
        at = None
        for chunk in tables.messages.entries(prefix, position):
            if rows_left >= 0:
                rows_left -= len(chunk)
                if rows_left < 0:
                    self.cut = True  # not held, not ended: ``end`` stays None
                    return
            for at, ptr, payload, ttl in chunk:
                at_start = at == start
                if at_start and skip_start:
                    continue
                if tx is not None and ptr is not None:  # else ACCEPT, without a call
                    verdict = accept(tx, ptr)
                    if verdict is _SKIP:
                        continue
                    if verdict is _HOLD:
                        self.held = True  # ends the read
                        self.held_at, self.held_pointer = keys.decode_position(at), ptr
                        return
                if ttl is not None:
                    publish_ms = keys.decode_position(at)[0]
                    if publish_ms + min(ttl * 1000, topic_ttl_ms) <= now:
                        continue
                if payload is not None:
                    yield Message((at + INLINE_PAYLOAD_POSITION, payload))
                    remaining -= 1
                    if remaining == 0:
                        return
                    continue
                assert ptr is not None
                if at_start and payload_start is not None:
                    p_from = (payload_start.write_ms, payload_start.p_seq)
                    p_inclusive = request.inclusive
                else:
                    p_from, p_inclusive = (0, 0), True
                p_start = keys.pack_position(*p_from)
                for p_chunk in tables.payloads.entries(prefix, abs(ptr), p_from):
                    if rows_left >= 0:
                        rows_left -= len(p_chunk)
                        if rows_left < 0:
                            self.cut = True
                            return
                    for p_at, write_ms, p_payload, p_ttl in p_chunk:
                        if not p_inclusive and p_at == p_start:
                            continue
                        if write_ms < smallest:
                            continue
                        if p_ttl is not None and write_ms + min(p_ttl * 1000, topic_ttl_ms) <= now:
                            continue
                        yield Message((at + p_at, p_payload))
                        remaining -= 1
                        if remaining == 0:
                            return
        if at is not None:
            self.end = keys.decode_position(at)
