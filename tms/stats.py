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
from tms.codec.values import decode_message_value, decode_payload_value
from tms.model import TopicMetadata
from tms.store.tables import Tables

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


def _entry_size(tables: Tables, prefix: bytes, value: bytes) -> tuple[int, int]:
    """(messages, payload bytes) of one message-table value; a commit marker counts the
    payload rows it references."""
    entry = decode_message_value(value)
    if entry.payload is not None:
        return 1, len(entry.payload)
    assert entry.tx_write_pointer is not None  # a reference always has a pointer
    count = size = 0
    for _key, payload_value in tables.payloads.rows(prefix, abs(entry.tx_write_pointer)):
        count += 1
        size += len(decode_payload_value(payload_value)[0])
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
    stop = keys.stop_key_for_prefix(prefix)
    store = tables.messages.store
    first = last = None
    for key, _value in store.scan(prefix, stop):
        first = keys.decode_message_key(key)[1]
        break
    for key, _value in store.scan(prefix, stop, reverse=True):
        last = keys.decode_message_key(key)[1]
        break

    messages = payload_bytes = rows = 0
    exact = True
    cut_key = b""
    cut_ms = 0
    for key, value in store.scan(prefix, stop):
        if rows >= count_limit:
            exact = False
            cut_key, cut_ms = key, keys.decode_message_key(key)[1]
            break
        count, size = _entry_size(tables, prefix, value)
        messages += count
        payload_bytes += size
        rows += max(count, 1)
    if not exact:
        scale = _scale(
            tables, prefix, stop=stop, cut_key=cut_key, first=first, last=last, cut_ms=cut_ms
        )
        messages = round(messages * scale)
        payload_bytes = round(payload_bytes * scale)

    rate = _rate(
        tables,
        prefix,
        stop=stop,
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
        disk_bytes=tables.topic_bytes(prefix),
        first_publish_ms=first,
        last_publish_ms=last,
        publish_rate=rate,
    )


def _scale(
    tables: Tables,
    prefix: bytes,
    *,
    stop: bytes | None,
    cut_key: bytes,
    first: int | None,
    last: int | None,
    cut_ms: int,
) -> float:
    """How many times the counted part the whole generation is (at least 1)."""
    store = tables.messages.store
    counted = store.approximate_size(prefix, cut_key)
    whole = store.approximate_size(prefix, stop)
    if counted > 0 and whole >= counted:
        return whole / counted
    if first is not None and last is not None and cut_ms > first:
        return max(1.0, (last - first + 1) / (cut_ms - first))
    return 1.0


def _rate(
    tables: Tables,
    prefix: bytes,
    *,
    stop: bytes | None,
    now_ms: int,
    count_limit: int,
    window_ms: int,
) -> float:
    since = now_ms - window_ms
    messages = rows = 0
    oldest = None
    for key, value in tables.messages.store.scan(prefix, stop, reverse=True):
        publish_ms = keys.decode_message_key(key)[1]
        if publish_ms < since:
            break
        if rows >= count_limit:
            # Too many to count in the window: the rate over what was counted.
            assert oldest is not None
            return messages * 1000 / max(1, now_ms - oldest)
        count, _size = _entry_size(tables, prefix, value)
        messages += count
        rows += max(count, 1)
        oldest = publish_ms
    return messages * 1000 / window_ms
