"""Positions in a topic, Spark's streaming offsets, and splitting a read (pure: no I/O).

A ``Position`` is a message id as a tuple ``(publish_ms, seq, write_ms, p_seq)`` and sorts
like one: ``(ms, seq, 0, 0)`` is the start of the entry at ``(ms, seq)``, anything after it
with the same ``(ms, seq)`` a staged row inside that commit marker. A read range
``[start, stop)`` holds the messages whose ids are at or after ``start`` and before
``stop``.

Streaming offsets (what Spark checkpoints) name, per topic, the next position to read::

    {"topics": {"events": {"ms": 1767225600000, "seq": 3},
                "audit": {"ms": 1767225600120, "seq": 0, "wms": 1767225600100,
                          "pseq": 17, "exact": true}}}

``wms``/``pseq`` appear inside a commit marker; ``exact`` says a message is known to be at
that position (the batch before was cut there by a limit or an open transaction), which is
what lets a later batch notice that it expired unread. Offsets of earlier versions,
``{"ms": …, "seq": …}`` for the one topic, are read too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tms.errors import TmsInvalidArgumentError
from tms.ids import MessageId

__all__ = [
    "Position",
    "StreamPosition",
    "decode_offset",
    "encode_offset",
    "entry",
    "next_entry",
    "plan_ranges",
    "position_of",
]

Position = tuple[int, int, int, int]
_MAX_SEQ = 0xFFFF


def entry(ms: int, seq: int) -> Position:
    """The start of the entry at ``(ms, seq)``."""
    return (ms, seq, 0, 0)


def next_entry(ms: int, seq: int) -> Position:
    """The first position after everything of the entry at ``(ms, seq)``."""
    return (ms, seq + 1, 0, 0) if seq < _MAX_SEQ else (ms + 1, 0, 0, 0)


def position_of(message_id: MessageId) -> Position:
    return (message_id.publish_ms, message_id.seq, message_id.write_ms, message_id.p_seq)


@dataclass(frozen=True, slots=True, order=True)
class StreamPosition:
    """One topic's place in a stream: the next ``position`` to read; ``exact``: a
    message is known to be there."""

    position: Position
    exact: bool = False

    def to_json(self) -> dict[str, Any]:
        ms, seq, wms, pseq = self.position
        out: dict[str, Any] = {"ms": ms, "seq": seq}
        if wms or pseq:
            out.update(wms=wms, pseq=pseq)
        if self.exact:
            out["exact"] = True
        return out

    @classmethod
    def from_json(cls, value: Any, what: str) -> StreamPosition:
        if not isinstance(value, Mapping):
            raise TmsInvalidArgumentError(f"{what}: an offset is an object with ms and seq")
        try:
            parts = tuple(int(value.get(k, 0)) for k in ("ms", "seq", "wms", "pseq"))
            MessageId(*parts)  # checks the ranges
        except (TypeError, ValueError) as exc:
            raise TmsInvalidArgumentError(f"{what}: not an offset: {value!r}") from exc
        if "ms" not in value or "seq" not in value:
            raise TmsInvalidArgumentError(f"{what}: an offset needs ms and seq")
        ms, seq, wms, pseq = parts
        return cls((ms, seq, wms, pseq), value.get("exact") is True)


def encode_offset(positions: Mapping[str, StreamPosition]) -> dict[str, Any]:
    """Spark's offset for ``positions`` (topics in name order, so equal positions give
    equal offsets)."""
    return {"topics": {name: positions[name].to_json() for name in sorted(positions)}}


def decode_offset(offset: Mapping[str, Any], single_topic: str | None) -> dict[str, StreamPosition]:
    """The positions of an offset; ``single_topic`` names the topic of an offset written
    by an earlier version (``{"ms", "seq"}``)."""
    topics = offset.get("topics")
    if topics is None and "ms" in offset and single_topic is not None:
        return {single_topic: StreamPosition.from_json(offset, "offset")}
    if not isinstance(topics, Mapping):
        raise TmsInvalidArgumentError(f"not a tms offset: {dict(offset)!r}")
    return {
        str(name): StreamPosition.from_json(value, f"offset of {name}")
        for name, value in topics.items()
    }


def plan_ranges(first: Position, stop: Position, count: int) -> list[tuple[Position, Position]]:
    """Split ``[first, stop)`` into at most ``count`` ranges, in order, covering it
    exactly; empty when ``first >= stop``. Cuts fall at entry boundaries, never inside a
    commit marker: at millisecond boundaries, evenly by time, when the range spans
    several milliseconds; between entries (sequence numbers are dense within a
    millisecond) when it lies within one."""
    if first >= stop:
        return []
    lo = first[0]
    last_ms = stop[0] if stop[1:] != (0, 0, 0) else stop[0] - 1  # the last ms it may hold
    if last_ms > lo:
        span = last_ms - lo + 1
        cuts = {entry(lo + math.ceil(k * span / count), 0) for k in range(1, count)}
    else:
        top = stop[1] if stop[0] == lo else _MAX_SEQ + 1
        span = top - first[1]
        cuts = {entry(lo, first[1] + math.ceil(k * span / count)) for k in range(1, count)}
    bounds = [first, *sorted(c for c in cuts if first < c < stop), stop]
    return [(a, b) for a, b in itertools.pairwise(bounds) if a < b]
