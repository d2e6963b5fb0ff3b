"""Streaming reads: micro-batches of committed messages, per topic, in order, the same
whenever Spark replays them.

Offsets are positions per topic (``tms.spark.positions``): the next message to read.
``latestOffset`` ends each topic's batch where a transactional consumer would stop now
(the first entry of a transaction still open, else past the last entry), or earlier,
where ``maxOffsetsPerTrigger`` is reached (``bounds`` with a limit counts the messages,
commit markers row by row, and says where the limit falls, possibly inside a marker).
So every offset is a committed position and a range between two offsets reads the same
messages whenever it is replayed (from a checkpoint, after a restart): each entry in it
was committed, rolled back or invalid when the offset was taken, and stays so.

Admission control: ``maxOffsetsPerTrigger`` is shared fairly between the topics (an
equal share each, then what the quiet ones left to the busy ones); with
``minOffsetsPerTrigger`` a batch waits until that many messages are there or
``maxTriggerDelay`` has passed since the last batch; ``Trigger.AvailableNow`` reads what
was there when the query started, in batches of ``maxOffsetsPerTrigger``.

Data loss: when a batch starts at a position where a message was known to be (the batch
before was cut there by a limit or an open transaction) and that message is gone, older
than the topic's TTL, it expired unread: ``failOnDataLoss`` fails the query (default) or
logs and goes on. A topic deleted under a query counts the same way. A query stopped for
longer than the TTL may miss messages that were published and expired meanwhile without
noticing, since nothing about them remains.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from tms.errors import TmsError, TmsInvalidArgumentError, TopicNotFoundError
from tms.ids import MessageId
from tms.spark.options import EARLIEST, LATEST, SourceOptions
from tms.spark.positions import (
    Position,
    StreamPosition,
    decode_offset,
    encode_offset,
    entry,
    plan_ranges,
    position_of,
)
from tms.spark.read import ReadRange, read_range, resolve_topics, snapshot, stop_of
from txn.codec import encode_transaction
from txn.transaction import Transaction

if TYPE_CHECKING:
    from tms.client.http import MessagingClient

__all__ = ["TmsStreamReader"]

log = logging.getLogger(__name__)

_ORIGIN = StreamPosition(entry(0, 0))
Positions = dict[str, StreamPosition]


class TmsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. Spark keeps one on the driver for the query's run."""

    def __init__(
        self,
        options: SourceOptions,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self._wall_ms = wall_ms
        self._monotonic = monotonic
        self._target: Positions | None = None
        self._last_batch = monotonic()
        self._latest: dict[str, Any] | None = None

    def _client(self) -> MessagingClient:
        return self.options.messaging()

    # -- where to start ---------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        with self._client() as client:
            tx = snapshot(self.options)
            topics = resolve_topics(self.options, client)
            return encode_offset({t: self._initial(client, t, tx) for t in topics})

    def _initial(
        self, client: MessagingClient, topic: str, tx: Transaction | None
    ) -> StreamPosition:
        opts = self.options
        if opts.starting_ms is not None:
            return StreamPosition(entry(opts.starting_ms, 0))
        spec: Any = opts.starting
        if isinstance(spec, dict):
            if topic in spec:
                spec = spec[topic]
            elif opts.topic_pattern is not None:
                spec = EARLIEST  # a topic that appeared later: from its beginning
            else:
                raise TmsInvalidArgumentError(f"startingOffsets names no position for {topic}")
        if spec == EARLIEST:
            return _ORIGIN
        if spec == LATEST:
            _, end = self._end_counted(client, topic, _ORIGIN, tx, None)
            return StreamPosition(end.position)
        if isinstance(spec, str):
            return StreamPosition(position_of(MessageId.from_hex(spec)))
        return StreamPosition.from_json(spec, f"startingOffsets of {topic}")

    # -- where a batch ends -------------------------------------------------------------

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        if self.options.max_rows is not None:
            return ReadMaxRows(self.options.max_rows)
        if self.options.min_rows is not None:
            return ReadMinRows(self.options.min_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        start = self._latest or self.initialOffset()
        self._target = self._ends_from(start, ReadAllAvailable())

    def latestOffset(  # noqa: N802 - Spark's name
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """Where the next batch ends. Before Spark 4.2, ``start`` is not given: the
        reader continues from the offset it returned last."""
        if start is None:
            start = self._latest or self.initialOffset()
        ends = self._ends_from(start, limit or self.getDefaultReadLimit())
        if ends is None:
            return dict(start)  # too few messages yet (minOffsetsPerTrigger)
        begin = decode_offset(start, self.options.topic)
        if self._target is not None:
            ends = {
                t: min(p, self._target.get(t, begin.get(t, p)), key=lambda s: s.position)
                for t, p in ends.items()
            }
        if any(p.position != begin.get(t, _ORIGIN).position for t, p in ends.items()):
            self._last_batch = self._monotonic()
        offset = encode_offset(ends)
        self._latest = offset
        return offset

    def _ends_from(self, start: dict[str, Any], limit: ReadLimit) -> Positions | None:
        """Each topic's end for a batch from ``start``; None: wait for more."""
        opts = self.options
        begin = decode_offset(start, opts.topic)
        with self._client() as client:
            tx = snapshot(opts)
            current = resolve_topics(opts, client)
            for name in current:
                if name not in begin:
                    begin[name] = self._initial(client, name, tx)
            for name in sorted(set(begin) - set(current)):
                self._lost_topic(name, begin.pop(name))
            if self._too_few(client, begin, tx, limit):
                return None
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            return self._ends(client, begin, tx, max_rows)

    def _too_few(
        self, client: MessagingClient, begin: Positions, tx: Transaction | None, limit: ReadLimit
    ) -> bool:
        """``minOffsetsPerTrigger``: fewer messages than that, and ``maxTriggerDelay``
        has not passed since the last batch."""
        need = self.options.min_rows
        if need is None or isinstance(limit, ReadAllAvailable) or self._target is not None:
            return False
        if self._monotonic() - self._last_batch >= self.options.max_trigger_delay_ms / 1000:
            return False
        for name, pos in begin.items():
            counted = self._bounds(client, name, pos, tx, need).counted or 0
            need -= counted
            if need <= 0:
                return False
        return True

    def _ends(
        self,
        client: MessagingClient,
        begin: Positions,
        tx: Transaction | None,
        max_rows: int | None,
    ) -> Positions:
        """Each topic's end: everything committed, or a fair share of ``max_rows``."""
        if max_rows is None:
            return {t: self._end_counted(client, t, p, tx, None)[1] for t, p in begin.items()}
        ends: Positions = {}
        left = max_rows
        share = max(1, max_rows // max(1, len(begin)))
        cut: list[str] = []
        for name, pos in begin.items():
            counted, ends[name] = self._end_counted(client, name, pos, tx, min(share, left))
            left -= counted
            if ends[name].exact and ends[name].position != pos.position:
                cut.append(name)
        for name in cut:  # what the quiet topics left, to the busy ones in turn
            if left <= 0:
                break
            counted, ends[name] = self._end_counted(client, name, ends[name], tx, left)
            left -= counted
        return ends

    def _bounds(
        self,
        client: MessagingClient,
        topic: str,
        pos: StreamPosition,
        tx: Transaction | None,
        limit: int | None,
    ) -> Any:
        try:
            return client.bounds(
                self.options.topic_id(topic),
                start=MessageId(*pos.position).to_bytes(),
                transaction=tx,
                limit=limit,
            )
        except TopicNotFoundError:
            self._lost_topic(topic, pos)
            raise _TopicGoneError from None

    def _end_counted(
        self,
        client: MessagingClient,
        topic: str,
        pos: StreamPosition,
        tx: Transaction | None,
        limit: int | None,
    ) -> tuple[int, StreamPosition]:
        if limit == 0:
            return 0, pos
        try:
            bounds = self._bounds(client, topic, pos, tx, limit)
        except _TopicGoneError:
            return 0, pos
        stop = stop_of(bounds)
        if stop is None or stop <= pos.position:
            return 0, pos
        exact = bounds.held is not None or bounds.after_limit is not None
        return bounds.counted or 0, StreamPosition(stop, exact)

    def _lost_topic(self, topic: str, pos: StreamPosition) -> None:
        message = f"topic {topic} is gone (deleted) under the stream, at {pos.to_json()}"
        if self.options.fail_on_data_loss:
            raise TmsError(f"{message} (failOnDataLoss=false to go on without it)")
        log.warning("%s; going on without it", message)

    # -- a batch --------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[ReadRange]:
        opts = self.options
        begin, stop = decode_offset(start, opts.topic), decode_offset(end, opts.topic)
        todo = {t: p for t, p in stop.items() if p.position > begin.get(t, _ORIGIN).position}
        if not todo:
            return []
        tx = snapshot(opts)
        tx_bytes = encode_transaction(tx) if tx is not None else None
        out: list[ReadRange] = []
        with self._client() as client:
            for name, last in sorted(todo.items()):
                first = self._first(client, name, begin.get(name, _ORIGIN), tx)
                for a, b in plan_ranges(first, last.position, opts.partitions):
                    out.append(ReadRange(len(out), name, a, b, tx_bytes))
        return out

    def _first(
        self, client: MessagingClient, topic: str, pos: StreamPosition, tx: Transaction | None
    ) -> Position:
        """Where the batch's data really begins (not at epoch 0 for a new query), after
        checking that an exact start is still there."""
        try:
            bounds = self._bounds(client, topic, pos, tx, 1)
        except _TopicGoneError:
            return pos.position
        here = pos.position[:2]
        if pos.exact and here not in (bounds.first, bounds.held):
            self._check_expired(client, topic, pos)
        if bounds.first is None:
            return pos.position
        return max(pos.position, entry(*bounds.first))

    def _check_expired(self, client: MessagingClient, topic: str, pos: StreamPosition) -> None:
        ttl_ms = int(client.get_topic(self.options.topic_id(topic)).get("ttl", "0")) * 1000
        if pos.position[0] >= self._wall_ms() - ttl_ms:
            return  # gone for another reason (an invalid transaction's entry, cleaned up)
        message = (
            f"messages of topic {topic} from {pos.to_json()} on expired (TTL) before the "
            "query read them"
        )
        if self.options.fail_on_data_loss:
            raise TmsError(f"{message} (failOnDataLoss=false to skip them)")
        log.warning("%s; skipping them", message)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadRange)
        return read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the service keeps no cursor; the offsets are Spark's."""


class _TopicGoneError(Exception):
    """The topic was deleted (and the query goes on without it)."""
