"""Reading topics into DataFrames (batch), and what batch and streaming reads share.

A read is planned on the driver and split into ranges of positions ``[start, stop)``
(``tms.spark.positions``), read in parallel by the executors. The driver takes one
transaction snapshot (a transaction started and at once aborted: its snapshot stays valid
for reading), asks the service, per topic, where a read with it starts and stops
(``bounds``: the first entry of a transaction it cannot see, else the last entry), and
splits each topic's real range ``[first entry, stop)`` into ``partitions`` ranges. Every
range is read with that same snapshot, so the union is exactly what one transactional
consumer would have read at that moment. Nothing can later appear inside a planned range:
entries are only ever appended.

Rows are ``(id, publish_time, payload, topic)``: the message id (hex), the publish time
(UTC), the payload bytes and the topic's name; yielded as Arrow record batches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceReader,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from tms.ids import MessageId
from tms.model import TopicBounds, TopicId
from tms.spark.arrow_codec import consume_batch, messages_batch
from tms.spark.options import SourceOptions, speaks_binary
from tms.spark.positions import Position, entry, next_entry, plan_ranges
from tms.spark.source import SCHEMA
from txn.codec import decode_transaction, encode_transaction
from txn.transaction import Transaction

if TYPE_CHECKING:
    from tms.client.http import MessagingClient

__all__ = [
    "SCHEMA",
    "ReadRange",
    "TmsFilteringReader",
    "TmsReader",
    "read_range",
    "resolve_topics",
    "snapshot",
    "stop_of",
]

_CHUNK = 10_000
_EMPTY: Position = (0, 0, 0, 0)


@dataclass(frozen=True)
class ReadRange(InputPartition):
    """One partition: positions ``[start, stop)`` of ``topic``, read with
    ``transaction`` (codec bytes; None: non-transactional)."""

    index: int
    topic: str
    start: Position
    stop: Position
    transaction: bytes | None


def read_range(options: SourceOptions, part: ReadRange) -> Iterator[pa.RecordBatch]:
    """The messages of one range, as record batches of up to 10,000 rows, decoded a
    column at a time (``arrow_codec.consume_batch``)."""
    if part.start >= part.stop:
        return
    tx = decode_transaction(part.transaction) if part.transaction is not None else None
    topic = options.topic_id(part.topic)
    stop = MessageId(*part.stop).to_bytes().hex()  # ids sort as their hex
    with options.messaging() as client:
        start: bytes = MessageId(*part.start).to_bytes()
        inclusive = True
        while True:
            batch, held = poll_batch(client, topic, start, inclusive, tx)
            done = not batch.num_rows or held
            if batch.num_rows and batch.column(0)[-1].as_py() >= stop:
                done = True
                batch = batch.filter(pc.less(batch.column(0), stop))
            if batch.num_rows:
                yield batch
            if done:
                return
            start, inclusive = bytes.fromhex(batch.column(0)[-1].as_py()), False


def poll_batch(
    client: MessagingClient,
    topic: TopicId,
    start: bytes,
    inclusive: bool,
    tx: Transaction | None,
) -> tuple[pa.RecordBatch, bool]:
    """Up to 10,000 messages from ``start`` as a record batch of ``SCHEMA``; whether the
    read was held. Over HTTP the Avro answer is decoded a column at a time; over the
    binary protocol (``tms://``) its messages come decoded by thriftpy2's C loop."""
    if speaks_binary(client):
        result = client.poll(topic, start=start, inclusive=inclusive, limit=_CHUNK, transaction=tx)
        return messages_batch(result.messages, topic.topic), result.held
    body, held, _ = client.poll_encoded(
        topic, start=start, inclusive=inclusive, limit=_CHUNK, transaction=tx
    )
    return consume_batch(body, topic.topic), held


def snapshot(options: SourceOptions) -> Transaction | None:
    """A read snapshot: a transaction started and aborted at once (None: not
    transactional)."""
    if not options.transactional:
        return None
    client = options.tx_client()
    try:
        tx = client.start_short()
        client.abort(tx)
        return tx
    finally:
        client.close()


def resolve_topics(options: SourceOptions, client: MessagingClient) -> list[str]:
    """The topics a read covers now: the named ones, or those matching the pattern."""
    if options.topic_pattern is None:
        return list(options.topics)
    pattern = re.compile(options.topic_pattern)
    return sorted(t for t in client.list_topics(options.namespace) if pattern.fullmatch(t))


def stop_of(bounds: TopicBounds) -> Position | None:
    """Where a read planned from ``bounds`` ends (exclusive): the entry it was held at,
    the position past its limit, or past its last entry."""
    if bounds.held is not None:
        return entry(*bounds.held)
    if bounds.after_limit is not None:
        a = bounds.after_limit
        return (a.publish_ms, a.seq, a.write_ms, a.p_seq)
    if bounds.last is not None:
        return next_entry(*bounds.last)
    return None


class TmsReader(DataSourceReader):
    """Batch reads (see the module docstring), from ``startTime``/``startId`` to
    ``endTime``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.start_ms = options.start_ms
        self.end_ms = options.end_ms

    def partitions(self) -> Sequence[ReadRange]:
        opts = self.options
        tx = snapshot(opts)
        tx_bytes = encode_transaction(tx) if tx is not None else None
        start: bytes | int | None = opts.start_id if opts.start_id is not None else self.start_ms
        out: list[ReadRange] = []
        with opts.messaging() as client:
            topics = resolve_topics(opts, client)
            for name in topics:
                bounds = client.bounds(
                    opts.topic_id(name),
                    start=start,
                    inclusive=opts.start_id is None,
                    transaction=tx,
                )
                stop = stop_of(bounds)
                if stop is not None and self.end_ms is not None:
                    stop = min(stop, entry(self.end_ms, 0))
                if bounds.first is None or stop is None:
                    continue
                first = entry(*bounds.first)
                if opts.start_id is not None and bounds.first == _entry_of(opts.start_id):
                    first = _after_id(opts.start_id)  # resume inside that marker
                for a, b in plan_ranges(first, stop, opts.partitions):
                    out.append(ReadRange(len(out), name, a, b, tx_bytes))
        return out or [ReadRange(0, topics[0] if topics else "", _EMPTY, _EMPTY, None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadRange)
        return read_range(self.options, partition)


def _entry_of(message_id: bytes) -> tuple[int, int]:
    m = MessageId.from_bytes(message_id)
    return (m.publish_ms, m.seq)


def _after_id(message_id: bytes) -> Position:
    """The first position after message ``message_id`` (exclusive start)."""
    m = MessageId.from_bytes(message_id)
    if not m.is_payload_message:
        return next_entry(m.publish_ms, m.seq)
    if m.p_seq < 0xFFFF:
        return (m.publish_ms, m.seq, m.write_ms, m.p_seq + 1)
    return (m.publish_ms, m.seq, m.write_ms + 1, 0)


class TmsFilteringReader(TmsReader):
    """A ``TmsReader`` that also takes the range from filters on ``publish_time`` (Spark
    4.1+, with ``spark.sql.python.filterPushdown.enabled``; chosen by the
    ``pushFilters`` option, since Spark refuses a reader with ``pushFilters`` when that
    setting is off). Spark still applies the filters: the range is only narrowed."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - Spark's name
        for f in filters:
            ms = _filter_ms(f)
            if ms is not None:
                if isinstance(f, GreaterThan | GreaterThanOrEqual):
                    self.start_ms = max(self.start_ms or 0, ms)
                elif isinstance(f, LessThan | LessThanOrEqual):
                    self.end_ms = min(self.end_ms if self.end_ms is not None else ms + 1, ms + 1)
            yield f


def _filter_ms(f: Filter) -> int | None:
    """The time in ms of a comparison on ``publish_time`` (rounded to include more)."""
    if getattr(f, "attribute", None) != ("publish_time",):
        return None
    value: Any = getattr(f, "value", None)
    if isinstance(value, datetime):
        return max(0, math.floor(value.timestamp() * 1000))
    return None
