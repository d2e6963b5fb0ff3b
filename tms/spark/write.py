"""Writing DataFrames: every row of a job, or of a micro-batch, becomes visible to
transactional consumers at once, or never.

One transaction per job (batch) or per micro-batch (streaming), started on the driver
when Spark ships the writer to the tasks (Spark pickles the writer it sends to the
executors, never the one it makes to commit) and held there by a lease
(``tms.spark.lease``): renewed while the driver lives, invalidated when it dies. Every
task attempt takes a write pointer of its own, a *checkpoint* of that transaction, and
stores its rows under it in the payload table, routed by the ``topic`` option or the
row's ``topic`` column. Its commit message names the pointer and the rows per topic.

Spark hands the driver one message per partition, from the attempt that succeeded, so
the driver publishes the commit markers of exactly those pointers, per topic in one
atomic write (next to each other in the topic's order), then commits. Rows staged by
failed or speculative attempts are never marked; they age out with the topic's TTL.

Failures: a marker write or a commit without an answer leaves the driver unable to know
what the servers did, so it never *aborts* a transaction that may have published
markers: it **invalidates** it (markers of an invalid transaction stay invisible). A
commit whose answer was lost is resolved afterwards: invalidated if it had not happened,
reported as done if it had. A joined transaction (``transaction`` option, a long one) is
left to its owner to commit, abort or invalidate.

Streaming writes are published with an idempotency key, ``<query id>:<batch id>``: the
query id is Spark's, kept in the checkpoint, so a replayed batch is published once and a
new checkpoint never collides with an old one. See ``tms.spark.stream_write``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from tms.errors import TmsError, TmsInvalidArgumentError
from tms.spark.arrow_codec import publish_body
from tms.spark.lease import Lease, LeaseRegistry
from tms.spark.options import SourceOptions, speaks_binary
from txn.codec import decode_transaction, encode_transaction
from txn.transaction import Transaction, TransactionType

if TYPE_CHECKING:
    from txn.rpc.client import ThriftTxClient

__all__ = [
    "Columns",
    "StagedRows",
    "TmsWriter",
    "end_transaction",
    "stage_attempt",
    "stage_batches",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StagedRows(WriterCommitMessage):
    """What one task attempt staged: ``rows`` per topic under ``write_pointer`` (None
    when it had no rows), in the job's transaction ``transaction`` (codec bytes);
    ``query``: the streaming query's id."""

    partition: int
    attempt: int
    write_pointer: int | None
    transaction: bytes
    rows: dict[str, int] = field(default_factory=dict)
    query: str | None = None


def staged(messages: list[WriterCommitMessage | None]) -> list[StagedRows]:
    """The messages of the tasks that succeeded (Spark passes None for failed ones)."""
    return [m for m in messages if isinstance(m, StagedRows)]


def markers_by_topic(messages: list[StagedRows]) -> dict[str, list[int]]:
    """The write pointers to mark, per topic, in partition order."""
    out: dict[str, list[int]] = {}
    for m in sorted(messages, key=lambda m: m.partition):
        for topic, count in m.rows.items():
            if count and m.write_pointer is not None:
                out.setdefault(topic, []).append(m.write_pointer)
    return out


@dataclass(frozen=True)
class Columns:
    """Indexes of the ``payload``, ``ttl`` and ``topic`` columns, and the topic of rows
    without one (the ``topic`` option, which wins over the column)."""

    payload: int
    ttl: int | None
    topic: int | None
    default_topic: str | None

    @classmethod
    def of(cls, schema: StructType, options: SourceOptions) -> Columns:
        names = [f.name.lower() for f in schema.fields]
        if "payload" not in names:
            raise TmsInvalidArgumentError("the DataFrame needs a payload column (binary or string)")
        kind = schema.fields[names.index("payload")].dataType
        if not isinstance(kind, BinaryType | StringType):
            raise TmsInvalidArgumentError(
                f"the payload column must be binary or string, not {kind.simpleString()}"
            )
        topic_at = names.index("topic") if "topic" in names else None
        if options.topic is None and topic_at is None:
            raise TmsInvalidArgumentError("writing to tms needs the topic option or a topic column")
        return cls(
            names.index("payload"),
            names.index("ttl") if "ttl" in names else None,
            None if options.topic is not None else topic_at,
            options.topic,
        )


def check_topic(options: SourceOptions) -> None:
    """Fail on the driver, before any task runs, when the named topic is missing."""
    if options.topic is not None:
        with options.messaging() as client:
            client.get_topic(options.topic_id(options.topic))


def task_context() -> tuple[int, int, Any]:
    """(partition, attempt, TaskContext or None) of the running task."""
    from pyspark import TaskContext  # noqa: PLC0415 - only on executors

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber(), ctx) if ctx is not None else (0, 0, None)


def stage_batches(
    options: SourceOptions,
    batches: Iterator[pa.RecordBatch],
    columns: Columns,
    pointer: Callable[[], int],
) -> tuple[int | None, dict[str, int]]:
    """Store the rows under the write pointer ``pointer()`` gives on first use, in
    requests of ``batchSize`` per topic; (write pointer, rows per topic). Whole columns
    at a time: rows are routed by topic with Arrow's filters, and payloads without a TTL
    encoded straight from the Arrow column (``arrow_codec.publish_body``)."""
    wp: int | None = None
    counts: dict[str, int] = {}
    pending: dict[str, list[pa.Table]] = {}
    size = options.batch_size
    with options.messaging() as client:

        def send(topic: str, rows: pa.Table) -> None:
            assert wp is not None
            payloads = rows.column("payload").combine_chunks()
            ttls = rows.column("ttl") if "ttl" in rows.column_names else None
            if ttls is None or ttls.null_count == len(ttls):
                if speaks_binary(client):  # binary protocol: thriftpy2's C
                    client.store(options.topic_id(topic), payloads.to_pylist(), tx_write_pointer=wp)
                else:
                    client.store_encoded(options.topic_id(topic), publish_body(wp, payloads))
                return
            client.store(
                options.topic_id(topic),
                payloads.to_pylist(),
                tx_write_pointer=wp,
                ttls=[int(t) if t else None for t in ttls.to_pylist()],
            )

        def add(topic: Any, rows: pa.Table) -> None:
            nonlocal wp
            if not topic:
                raise TmsInvalidArgumentError("a row's topic must not be null or empty")
            if wp is None:
                wp = pointer()
            kept = pending.setdefault(topic, [])
            kept.append(rows)
            counts[topic] = counts.get(topic, 0) + rows.num_rows
            if sum(t.num_rows for t in kept) < size:
                return
            whole = pa.concat_tables(kept)
            sent = 0
            while whole.num_rows - sent >= size:
                send(topic, whole.slice(sent, size))
                sent += size
            kept[:] = [whole.slice(sent)] if sent < whole.num_rows else []

        for batch in batches:
            if batch.num_rows:
                for topic, rows in _routed(batch, columns):
                    add(topic, rows)
        for topic, kept in pending.items():
            if kept:
                send(topic, pa.concat_tables(kept))
    return wp, counts


def _routed(batch: pa.RecordBatch, columns: Columns) -> Iterator[tuple[Any, pa.Table]]:
    """The batch's rows per topic, in their order, as tables of ``payload`` (binary)
    and, when the DataFrame has one, ``ttl``."""
    column = batch.column(columns.payload)
    if column.null_count:
        raise TmsInvalidArgumentError("payload must not be null")
    if not pa.types.is_binary(column.type):
        column = column.cast(pa.binary())  # strings: their UTF-8 bytes
    arrays, names = [column], ["payload"]
    if columns.ttl is not None:
        arrays.append(batch.column(columns.ttl))
        names.append("ttl")
    rows = pa.Table.from_arrays(arrays, names=names)
    if columns.topic is None:
        yield columns.default_topic, rows
        return
    topics = batch.column(columns.topic)
    if topics.null_count:
        raise TmsInvalidArgumentError("a row's topic must not be null or empty")
    for topic in pc.unique(topics).to_pylist():
        yield topic, rows.filter(pc.equal(topics, topic))


def stage_attempt(
    options: SourceOptions,
    transaction: bytes,
    batches: Iterator[pa.RecordBatch],
    columns: Columns,
    query: str | None = None,
) -> StagedRows:
    """A task attempt's work: its rows staged under a checkpoint of ``transaction``,
    taken on the first row; the commit message that names it."""
    partition, attempt, _ctx = task_context()
    tx = decode_transaction(transaction)
    client = options.tx_client()
    try:
        wp, counts = stage_batches(
            options, batches, columns, lambda: client.checkpoint(tx).write_pointer
        )
    finally:
        client.close()
    return StagedRows(partition, attempt, wp, transaction, counts, query)


def start_held(options: SourceOptions, tag: str | None = None) -> bytes:
    """Start a short transaction with timeout ``txTimeoutS`` and hold it for this driver
    (``tms.spark.lease``); its codec bytes."""
    client = options.tx_client()
    try:
        tx = client.start_short(options.tx_timeout_s)
    finally:
        client.close()
    tls = dataclasses.asdict(options.tx_tls) if options.tx_tls is not None else None
    LeaseRegistry().hold(
        Lease.for_this_driver(
            tx.transaction_id, options.require_tx_server(), options.tx_timeout_s, tag, tls
        )
    )
    return encode_transaction(tx)


def invalidate(options: SourceOptions, tx: Transaction) -> None:
    """Invalidate ``tx``, best effort: if the transaction server cannot be reached, the
    transaction times out (its lease is released) and is invalidated by the manager."""
    client = options.tx_client()
    try:
        client.invalidate(tx.transaction_id)
    except Exception:
        log.warning("could not invalidate %d; it will time out", tx.transaction_id, exc_info=True)
    finally:
        client.close()


def commit_resolved(options: SourceOptions, tx: Transaction) -> None:
    """Commit ``tx``. When the commit fails without saying for sure that it failed (no
    answer, or an answer to a retry), find out: invalidate it (then it had not happened,
    and the error is raised) or see it committed (then it had)."""
    client = options.tx_client()
    try:
        try:
            client.can_commit_or_throw(tx, [])
            client.commit_or_throw(tx)
        except Exception as failure:
            if not _committed_after_all(client, tx, failure):
                raise
            log.warning("commit of %d answered %r, but it happened", tx.transaction_id, failure)
    finally:
        client.close()


def _committed_after_all(client: ThriftTxClient, tx: Transaction, failure: Exception) -> bool:
    """After ``failure`` to commit: False once ``tx`` is invalid (nothing of it will ever
    show), True if it committed."""
    try:
        if client.invalidate(tx.transaction_id):
            return False
        probe = client.start_short()
        client.abort(probe)
    except Exception as exc:
        raise TmsError(
            f"the outcome of committing transaction {tx.transaction_id} is unknown (its "
            f"data is either all visible or invisible for good): {failure!r}"
        ) from exc
    return probe.is_visible(tx.transaction_id) and not probe.is_invalid(tx.transaction_id)


def end_transaction(options: SourceOptions, tx: Transaction, *, commit: bool) -> None:
    """Commit (resolved) or invalidate a held transaction, then release its lease."""
    try:
        if commit:
            commit_resolved(options, tx)
        else:
            invalidate(options, tx)
    finally:
        LeaseRegistry().release(tx.transaction_id)


class TmsWriter(DataSourceArrowWriter):
    """Batch writes (see the module docstring). Made on the driver and pickled to the
    executors; Spark hands the pickled writer back to the driver to commit or abort."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = Columns.of(schema, options)
        check_topic(options)
        self.owned = options.transaction is None
        self.transaction = options.transaction
        if options.transaction is not None:
            joined = decode_transaction(options.transaction)
            if joined.type is not TransactionType.LONG:
                raise TmsInvalidArgumentError(
                    "join a long transaction: aborting a short one would not invalidate it, "
                    "and the job's markers would become visible"
                )

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the writer once, on the driver, to ship it to the tasks: the
        # job's transaction starts here, so a writer made but never run holds none.
        if self.transaction is None:
            self.transaction = start_held(self.options)
        return self.__dict__.copy()

    def _tx(self) -> Transaction:
        assert self.transaction is not None
        return decode_transaction(self.transaction)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        assert self.transaction is not None
        return stage_attempt(self.options, self.transaction, iterator, self.columns)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tx = self._tx()
        done = staged(messages)
        try:
            with self.options.messaging() as messaging:
                for topic, pointers in sorted(markers_by_topic(done).items()):
                    messaging.publish_markers(self.options.topic_id(topic), pointers)
        except BaseException:
            if self.owned:
                end_transaction(self.options, tx, commit=False)
            raise
        if self.owned:
            end_transaction(self.options, tx, commit=True)
        log.info("wrote %d rows", sum(sum(m.rows.values()) for m in done))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.owned and self.transaction is not None:
            end_transaction(self.options, self._tx(), commit=False)
