"""What a topic holds, read from its tables without consuming anything: messages, bytes,
first and last publish time, and the publish rate.

Counting is bounded, so stats stay cheap on a topic of any size:

* ``messages`` and ``payload_bytes`` are exact when the topic's live generation has at
  most ``count_limit`` rows (message-table entries plus the payload rows that commit
  markers reference); beyond, they are **estimates** (``exact`` is False): the counts of
  the oldest ``count_limit`` rows scaled by the share of the generation's stored bytes
  those rows take (LevelDB's size estimate), or, when the store cannot say (rows still
  in its write buffer), by the share of the topic's time span they cover.
* ``first_publish_ms`` and ``last_publish_ms`` are exact (the first and last key).
* ``publish_rate`` is messages per second over the last ``rate_window_ms``, counted
  backwards from the newest entry; when more than ``count_limit`` rows were written in
  that window, over the time the newest ``count_limit`` rows span instead.
* ``disk_bytes`` is LevelDB's estimate of the bytes on disk (``tms_topic_bytes``; the
  newest writes count once flushed from its write buffer).
* ``subscriptions`` and ``max_lag``, the largest of their lags (``tms.lag``), are filled
  in by ``MessagingService.topic_stats``.

What is counted is what is stored: rolled-back entries and expired messages that
cleanup has not yet removed count too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tms.codec import keys
from tms.model import TopicMetadata
from tms.store.tables import MessageRow, Tables

__all__ = ["COUNT_LIMIT", "RATE_WINDOW_MS", "TopicStats", "topic_stats"]

COUNT_LIMIT = 20_000
RATE_WINDOW_MS = 60_000


@dataclass(frozen=True, slots=True)
class TopicStats:
    """See the module docstring; times in milliseconds since the epoch."""

    namespace: str
    topic: str
    ttl_s: int
    generation: int
    messages: int
    payload_bytes: int
    exact: bool
    disk_bytes: int
    first_publish_ms: int | None
    last_publish_ms: int | None
    publish_rate: float
    """Messages per second (see the module docstring)."""
    subscriptions: int = 0
    max_lag: int | None = None
    """The largest lag of the topic's subscriptions (``tms.lag``), None without any."""

    def to_json(self) -> dict[str, Any]:
        """The REST API's ``TopicStats`` object."""
        return {
            "namespace": self.namespace,
            "topic": self.topic,
            "ttl": self.ttl_s,
            "generation": self.generation,
            "messages": self.messages,
            "payloadBytes": self.payload_bytes,
            "exact": self.exact,
            "diskBytes": self.disk_bytes,
            "firstPublishTime": self.first_publish_ms,
            "lastPublishTime": self.last_publish_ms,
            "publishRate": round(self.publish_rate, 3),
            "subscriptions": self.subscriptions,
            "maxLag": self.max_lag,
        }


def _entry_size(tables: Tables, prefix: bytes, row: MessageRow) -> tuple[int, int]:
    """(messages, payload bytes) of one message row; a commit marker counts the payload
    rows it references."""
    entry = row.entry
    if entry.payload is not None:
        return 1, len(entry.payload)
    assert entry.tx_write_pointer is not None  # a reference always has a pointer
    count = size = 0
    for payload in tables.payloads.scan(prefix, abs(entry.tx_write_pointer)):
        count += 1
        size += len(payload.payload)
    return count, size


def topic_stats(
    tables: Tables,
    metadata: TopicMetadata,
    now_ms: int,
    *,
    count_limit: int = COUNT_LIMIT,
    rate_window_ms: int = RATE_WINDOW_MS,
) -> TopicStats:
    """The stats of ``metadata``'s live generation (module docstring)."""
    prefix = keys.topic_prefix(metadata.topic, metadata.generation)
    messages_table = tables.messages
    first_position = messages_table.first_position(prefix)
    last_position = messages_table.last_position(prefix)
    first = first_position[0] if first_position is not None else None
    last = last_position[0] if last_position is not None else None

    messages = payload_bytes = rows = 0
    exact = True
    cut: tuple[int, int] = (0, 0)
    for row in messages_table.scan(prefix):
        if rows >= count_limit:
            exact = False
            cut = (row.publish_ms, row.seq)
            break
        count, size = _entry_size(tables, prefix, row)
        messages += count
        payload_bytes += size
        rows += max(count, 1)
    if not exact:
        scale = _scale(tables, prefix, cut=cut, first=first, last=last)
        messages = round(messages * scale)
        payload_bytes = round(payload_bytes * scale)

    rate = _rate(
        tables,
        prefix,
        now_ms=now_ms,
        count_limit=count_limit,
        window_ms=rate_window_ms,
    )
    return TopicStats(
        namespace=metadata.topic.namespace,
        topic=metadata.topic.topic,
        ttl_s=metadata.ttl_s,
        generation=metadata.generation,
        messages=messages,
        payload_bytes=payload_bytes,
        exact=exact,
        disk_bytes=tables.topic_bytes(metadata),
        first_publish_ms=first,
        last_publish_ms=last,
        publish_rate=rate,
    )


def _scale(
    tables: Tables,
    prefix: bytes,
    *,
    cut: tuple[int, int],
    first: int | None,
    last: int | None,
) -> float:
    """How many times the counted part (the rows before ``cut``) the whole generation is
    (at least 1)."""
    counted = tables.messages.approximate_bytes(prefix, until=cut)
    whole = tables.messages.approximate_bytes(prefix)
    if counted > 0 and whole >= counted:
        return whole / counted
    cut_ms = cut[0]
    if first is not None and last is not None and cut_ms > first:
        return max(1.0, (last - first + 1) / (cut_ms - first))
    return 1.0


def _rate(
    tables: Tables,
    prefix: bytes,
    *,
    now_ms: int,
    count_limit: int,
    window_ms: int,
) -> float:
    since = now_ms - window_ms
    messages = rows = 0
    oldest = None
    for row in tables.messages.scan_back(prefix):
        publish_ms = row.publish_ms
        if publish_ms < since:
            break
        if rows >= count_limit:
            # Too many to count in the window: the rate over what was counted.
            assert oldest is not None
            return messages * 1000 / max(1, now_ms - oldest)
        count, _size = _entry_size(tables, prefix, row)
        messages += count
        rows += max(count, 1)
        oldest = publish_ms
    return messages * 1000 / window_ms
