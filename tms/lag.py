"""Lag: how many messages lie between subscription positions and the end of a topic.

What counts: every message of the live generation at or after the position that a read
could still return — not rolled back (nor negated by cleanup as an invalid
transaction's), not older than the topic's TTL; a commit marker counts its payloads.
Messages of transactions still in progress count (they are on their way); a
subscription's payload filter is not applied.

Cost is bounded whatever the topic's size or the number of positions: one backward scan
of the topic's newest entries serves every position of the call. It stops at the oldest
position asked about (every position is then counted exactly: subscriptions that keep
up cost a few rows, not a window), and at the latest after ``count_limit`` rows
(entries plus the payload rows of commit markers). A position inside that window gets
an **exact** count; one older than it an **estimate**: the window's count plus its rate
(messages per millisecond of publish time) times the time between the position and the
window. A read that reached the beginning of the topic (or its TTL bound) counts every
position exactly. The Prometheus gauge asks with ``GAUGE_COUNT_LIMIT`` (1,000 rows a
topic a scrape); ``GET`` and ``list`` with ``COUNT_LIMIT`` (10,000).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from tms.codec import keys
from tms.ids import MessageId
from tms.model import TopicMetadata
from tms.store.tables import Tables
from tms.subscription import Lag

__all__ = ["COUNT_LIMIT", "GAUGE_COUNT_LIMIT", "lags"]

COUNT_LIMIT = 10_000
GAUGE_COUNT_LIMIT = 1_000


def _payload_rows(tables: Tables, prefix: bytes, wp: int, smallest: int) -> int:
    return sum(1 for row in tables.payloads.scan(prefix, wp) if row.write_ms >= smallest)


def lags(
    tables: Tables,
    metadata: TopicMetadata,
    positions: Sequence[MessageId],
    now_ms: int,
    *,
    count_limit: int = COUNT_LIMIT,
) -> list[Lag]:
    """The lag of each position (see the module docstring), in order."""
    if not positions:
        return []
    prefix = keys.topic_prefix(metadata.topic, metadata.generation)
    smallest = max(0, now_ms - metadata.ttl_s * 1000)
    oldest = min((p.publish_ms, p.seq) for p in positions)
    # Newest first: (position, messages from it to the end, marker's pointer or 0).
    window: list[tuple[tuple[int, int], int, int]] = []
    total = rows = 0
    complete = True
    for row in tables.messages.scan_back(prefix):
        if row.publish_ms < smallest or (row.publish_ms, row.seq) < oldest:
            break  # (past every position: each is inside the window, counted exactly)
        ptr, marker = row.entry.tx_write_pointer, 0
        if ptr is None:
            count = 1
        elif ptr < 0:
            count = 0  # rolled back, or negated by cleanup
        elif row.entry.payload is None:  # a commit marker: its payloads count
            count, marker = _payload_rows(tables, prefix, ptr, smallest), ptr
        else:
            count = 1
        total += count
        window.append(((row.publish_ms, row.seq), total, marker))
        rows += max(count, 1)
        if rows >= count_limit:
            complete = False
            break
    window.reverse()
    entries = [w[0] for w in window]
    first = tables.messages.first_position(prefix) if not complete else None
    first_ms = first[0] if first is not None else None
    results = []
    for position in positions:
        at = (position.publish_ms, position.seq)
        i = bisect_left(entries, at)
        if i == len(entries):
            results.append(Lag(0, True))
            continue
        if i > 0 or complete or entries[0] == at:
            lag = window[i][1]
            if entries[i] == at and window[i][2] > 0 and position.is_payload_message:
                lag -= _payloads_before(tables, prefix, window[i][2], position, smallest)
            results.append(Lag(max(lag, 0), True))
            continue
        # Older than the window: extrapolate at the window's rate.
        oldest_ms, newest_ms = entries[0][0], entries[-1][0]
        since = max(position.publish_ms, smallest, first_ms or 0)
        rate = total / max(1, newest_ms - oldest_ms + 1)
        results.append(Lag(total + round(rate * max(0, oldest_ms - since)), False))
    return results


def _payloads_before(
    tables: Tables, prefix: bytes, wp: int, position: MessageId, smallest: int
) -> int:
    """Payload rows of a commit marker before a position inside it."""
    count = 0
    for row in tables.payloads.scan(prefix, wp):
        if (row.write_ms, row.p_seq) >= (position.write_ms, position.p_seq):
            break
        if row.write_ms >= smallest:
            count += 1
    return count
