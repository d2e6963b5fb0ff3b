"""Reading topics into DataFrames: batch and streaming.

A read is planned on the driver and split by publish time into ranges of message-table
positions ``[start, stop)``, read in parallel by the executors:

* **Batch.** The driver takes one transaction snapshot (a transaction started and at
  once aborted: its snapshot stays valid for reading), asks the service where a read
  with it stops (``bounds``: the first entry of a transaction it cannot see, else the
  last entry), and every partition reads its range with that same snapshot. The union
  is exactly what one transactional consumer would have read at that moment. Nothing
  can later appear inside the planned ranges: entries are only ever appended.
* **Streaming.** Offsets are message-table positions ``{"ms", "seq"}`` (the next
  position to read). ``latestOffset`` is where a transactional consumer would stop now,
  so every offset is a committed position and a range between two offsets reads the
  same messages whenever it is replayed (from a checkpoint, after a restart): an entry
  in it was committed, rolled back or invalid when the offset was taken, and stays so.

Rows are ``(id, publish_time, payload)``: the hex message id, the publish time (UTC),
the payload bytes; yielded as Arrow record batches.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from tms.client.http import MessagingClient
from tms.ids import MessageId
from tms.model import TopicBounds
from tms.spark.options import SourceOptions
from txn.codec import decode_transaction, encode_transaction
from txn.rpc.client import ThriftTxClient

__all__ = [
    "SCHEMA",
    "ReadRange",
    "TmsFilteringReader",
    "TmsReader",
    "TmsStreamReader",
    "plan_ranges",
    "read_range",
]

SCHEMA = "id string, publish_time timestamp, payload binary"
_ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("publish_time", pa.timestamp("us", tz="UTC")),
        ("payload", pa.binary()),
    ]
)
_CHUNK = 10_000
Position = tuple[int, int]


@dataclass(frozen=True)
class ReadRange(InputPartition):
    """One partition: positions ``[start, stop)`` read with ``transaction`` (codec
    bytes; None: non-transactional)."""

    index: int
    start: Position
    stop: Position
    transaction: bytes | None


def _after(position: Position) -> Position:
    ms, seq = position
    return (ms, seq + 1) if seq < 0xFFFF else (ms + 1, 0)


def plan_ranges(first: Position, stop: Position, count: int) -> list[tuple[Position, Position]]:
    """Split ``[first, stop)`` into at most ``count`` ranges at millisecond boundaries,
    in order, covering it exactly; empty when ``first >= stop``."""
    if first >= stop:
        return []
    lo = first[0]
    last_ms = stop[0] if stop[1] > 0 else stop[0] - 1
    span = last_ms - lo + 1
    cuts = sorted({lo + math.ceil(k * span / count) for k in range(1, count)} - {lo})
    bounds = [first, *((ms, 0) for ms in cuts if (ms, 0) < stop), stop]
    return [(a, b) for a, b in itertools.pairwise(bounds) if a < b]


def read_range(options: SourceOptions, part: ReadRange) -> Iterator[pa.RecordBatch]:
    """The messages of one range, as record batches of up to 10,000 rows."""
    if part.start >= part.stop:
        return
    tx = decode_transaction(part.transaction) if part.transaction is not None else None
    with MessagingClient(options.url, token=options.token) as client:
        start: bytes = MessageId(*part.start).to_bytes()
        inclusive = True
        while True:
            result = client.poll(
                options.topic, start=start, inclusive=inclusive, limit=_CHUNK, transaction=tx
            )
            ids, times, payloads = [], [], []
            stop = part.stop
            done = not result.messages or result.held
            for id_bytes, payload in result.messages:
                ms = int.from_bytes(id_bytes[:8], "big")
                if (ms, int.from_bytes(id_bytes[8:10], "big")) >= stop:
                    done = True
                    break
                ids.append(id_bytes.hex())
                times.append(ms * 1000)
                payloads.append(payload)
            if ids:
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array(ids, pa.string()),
                        pa.array(times, pa.timestamp("us", tz="UTC")),
                        pa.array(payloads, pa.binary()),
                    ],
                    schema=_ARROW_SCHEMA,
                )
            if done:
                return
            start, inclusive = result.messages[-1][0], False


def _snapshot(options: SourceOptions) -> bytes | None:
    """A read snapshot: a transaction started and aborted at once (None: not
    transactional)."""
    if not options.transactional:
        return None
    client = ThriftTxClient(options.require_tx_server())
    try:
        tx = client.start_short()
        client.abort(tx)
        return encode_transaction(tx)
    finally:
        client.close()


def _stop_of(bounds: TopicBounds, end_ms: int | None) -> Position | None:
    """Where a read planned from ``bounds`` ends (exclusive)."""
    if bounds.held is not None:
        stop: Position | None = bounds.held
    elif bounds.last is not None:
        stop = _after(bounds.last)
    else:
        stop = None
    if stop is not None and end_ms is not None:
        stop = min(stop, (end_ms, 0))
    return stop


class TmsReader(DataSourceReader):
    """Batch reads (see the module docstring), from ``startTime``/``startId`` to
    ``endTime``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.start_ms = options.start_ms
        self.end_ms = options.end_ms

    def partitions(self) -> Sequence[ReadRange]:
        opts = self.options
        tx = _snapshot(opts)
        start: bytes | int | None = opts.start_id if opts.start_id is not None else self.start_ms
        with MessagingClient(opts.url, token=opts.token) as client:
            bounds = client.bounds(
                opts.topic,
                start=start,
                inclusive=opts.start_id is None,
                transaction=decode_transaction(tx) if tx is not None else None,
            )
        stop = _stop_of(bounds, self.end_ms)
        ranges = plan_ranges(bounds.first, stop, opts.partitions) if bounds.first and stop else []
        if not ranges:
            return [ReadRange(0, (0, 0), (0, 0), tx)]
        return [ReadRange(i, a, b, tx) for i, (a, b) in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadRange)
        return read_range(self.options, partition)


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


def _offset(position: Position) -> dict[str, int]:
    return {"ms": position[0], "seq": position[1]}


def _position(offset: dict[str, Any]) -> Position:
    return int(offset["ms"]), int(offset["seq"])


class TmsStreamReader(DataSourceStreamReader):
    """Streaming reads (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._latest: Position | None = None

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
        opts = self.options
        if opts.starting_latest:
            return _offset(self._stop_from((0, 0)))
        if opts.start_id is not None:
            start = MessageId.from_bytes(opts.start_id)
            return _offset(_after((start.publish_ms, start.seq)))
        return _offset((opts.start_ms or 0, 0))

    def latestOffset(  # noqa: N802 - Spark's name
        self, start: dict[str, Any] | None = None, limit: object = None
    ) -> dict[str, int]:
        """Where a transactional consumer would stop now. ``start`` comes with Spark 4.2+;
        before, the reader continues from the offset it returned last."""
        begin = (
            _position(start)
            if start is not None
            else self._latest or _position(self.initialOffset())
        )
        self._latest = self._stop_from(begin)
        return _offset(self._latest)

    def _stop_from(self, begin: Position) -> Position:
        opts = self.options
        tx = _snapshot(opts)
        with MessagingClient(opts.url, token=opts.token) as client:
            bounds = client.bounds(
                opts.topic,
                start=MessageId(*begin).to_bytes(),
                transaction=decode_transaction(tx) if tx is not None else None,
            )
        return max(begin, _stop_of(bounds, None) or begin)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[ReadRange]:
        ranges = plan_ranges(_position(start), _position(end), self.options.partitions)
        if not ranges:
            return []
        tx = _snapshot(self.options)
        return [ReadRange(i, a, b, tx) for i, (a, b) in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadRange)
        return read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the service keeps no cursor; the offsets are Spark's."""
