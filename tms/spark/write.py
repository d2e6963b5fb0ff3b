"""Writing DataFrames to a topic: every row of a job, or of a micro-batch, becomes
visible to transactional consumers at once, or never.

**Batch** (``df.write.format("tms")``). The driver starts a long transaction (or joins
the long transaction given in the ``transaction`` option: aborting a long transaction
invalidates it, which is what keeps the markers of a failed job invisible). Every task
attempt takes its own write pointer, a *checkpoint* of that transaction, and stores its
rows under it in the payload table; its commit message names the pointer. Spark hands
the driver one message per partition, from the attempt that succeeded, so the driver
publishes the commit markers of exactly those pointers, in one atomic write (next to
each other in the topic), then commits. Rows staged by failed or speculative attempts
are never marked; they age out with the topic's TTL. On failure the driver aborts the
transaction (a long one is invalidated): nothing of the job becomes visible. A joined
transaction is left to its owner to commit or abort; markers are published for it all
the same.

**Streaming** (``df.writeStream.format("tms")``). Spark offers no hook before a
micro-batch's tasks run, so each task starts its own short transaction and stages under
it. When the batch commits, the driver commits those transactions (no entry refers to
them yet, so this shows nothing) and then publishes their markers in one atomic write
keyed ``<writerId>:<batchId>``: the whole batch appears at once, and a batch replayed
after a failure (Spark re-runs a batch whose commit it did not record) is published
once. If the driver dies between the commits and the markers, the staged rows are never
marked and the replay publishes the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from tms.client.http import MessagingClient
from tms.errors import TmsInvalidArgumentError
from tms.spark.options import SourceOptions
from txn.codec import decode_transaction, encode_transaction
from txn.rpc.client import ThriftTxClient
from txn.transaction import Transaction, TransactionType

__all__ = ["StagedRows", "TmsStreamWriter", "TmsWriter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StagedRows(WriterCommitMessage):
    """What one task attempt staged: ``rows`` payloads under ``write_pointer`` (None
    when the partition was empty); ``transaction``: the attempt's own transaction
    (codec bytes), for streaming writes."""

    partition: int
    attempt: int
    write_pointer: int | None
    rows: int
    transaction: bytes | None = None


def _staged(messages: list[WriterCommitMessage | None]) -> list[StagedRows]:
    """The messages of the tasks that succeeded (Spark passes None for failed ones)."""
    return [m for m in messages if isinstance(m, StagedRows)]


def _columns(schema: StructType) -> tuple[int, int | None]:
    """Indexes of the ``payload`` and optional ``ttl`` columns."""
    names = [f.name.lower() for f in schema.fields]
    if "payload" not in names:
        raise TmsInvalidArgumentError("the DataFrame needs a payload column (binary or string)")
    return names.index("payload"), names.index("ttl") if "ttl" in names else None


def _check_topic(options: SourceOptions) -> None:
    """Fail on the driver, before any task runs, when the topic is missing."""
    with MessagingClient(options.url, token=options.token) as client:
        client.get_topic(options.topic)


def _task() -> tuple[int, int]:
    from pyspark import TaskContext  # noqa: PLC0415 - only on executors

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)


def _pairs(rows: Iterator[Row], columns: tuple[int, int | None]) -> Iterator[tuple[Any, Any]]:
    payload_at, ttl_at = columns
    for row in rows:
        yield row[payload_at], row[ttl_at] if ttl_at is not None else None


def _stage(
    options: SourceOptions,
    rows: Iterator[tuple[Any, Any]],
    pointer: Callable[[], int],
) -> tuple[int | None, int]:
    """Store ``(payload, ttl)`` pairs in batches under the write pointer ``pointer()``
    gives on first use; (write pointer, rows stored)."""
    wp: int | None = None
    count = 0
    payloads: list[bytes] = []
    ttls: list[int | None] = []
    with MessagingClient(options.url, token=options.token) as client:

        def flush() -> None:
            assert wp is not None
            client.store(
                options.topic,
                payloads,
                tx_write_pointer=wp,
                ttls=ttls if any(t is not None for t in ttls) else None,
            )
            payloads.clear()
            ttls.clear()

        for value, ttl in rows:
            if value is None:
                raise TmsInvalidArgumentError("payload must not be null")
            payloads.append(value.encode() if isinstance(value, str) else bytes(value))
            ttls.append(int(ttl) if ttl else None)
            count += 1
            if wp is None:
                wp = pointer()
            if len(payloads) >= options.batch_size:
                flush()
        if payloads:
            flush()
    return wp, count


def _arrow_rows(
    batches: Iterator[pa.RecordBatch], columns: tuple[int, int | None]
) -> Iterator[tuple[Any, Any]]:
    """(payload, ttl) pairs from record batches, converted a column at a time."""
    payload_at, ttl_at = columns
    for batch in batches:
        payloads = batch.column(payload_at).to_pylist()
        ttls = batch.column(ttl_at).to_pylist() if ttl_at is not None else None
        if ttls is None:
            for payload in payloads:
                yield payload, None
        else:
            yield from zip(payloads, ttls, strict=True)


class TmsWriter(DataSourceArrowWriter):
    """Batch writes (see the module docstring). Made on the driver, which starts (or
    joins) the transaction; pickled to the executors with it."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = _columns(schema)
        _check_topic(options)
        self.owned = options.transaction is None
        if options.transaction is not None:
            joined = decode_transaction(options.transaction)
            if joined.type is not TransactionType.LONG:
                raise TmsInvalidArgumentError(
                    "join a long transaction: aborting a short one would not invalidate it, "
                    "and the job's markers would become visible"
                )
            self.transaction = options.transaction
            return
        client = ThriftTxClient(options.require_tx_server())
        try:
            self.transaction = encode_transaction(client.start_long())
        finally:
            client.close()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        partition, attempt = _task()
        tx = decode_transaction(self.transaction)
        client = ThriftTxClient(self.options.require_tx_server())
        try:
            wp, count = _stage(
                self.options,
                _arrow_rows(iterator, self.columns),
                lambda: client.checkpoint(tx).write_pointer,
            )
        finally:
            client.close()
        return StagedRows(partition, attempt, wp, count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tx = decode_transaction(self.transaction)
        staged = _staged(messages)
        pointers = [m.write_pointer for m in staged if m.write_pointer is not None]
        if pointers:
            with MessagingClient(self.options.url, token=self.options.token) as messaging:
                messaging.publish_markers(self.options.topic, pointers)
        if self.owned:
            client = ThriftTxClient(self.options.require_tx_server())
            try:
                client.can_commit_or_throw(tx, [])
                client.commit_or_throw(tx)
            except Exception:
                client.abort(tx)  # long: invalidated, so the markers stay invisible
                raise
            finally:
                client.close()
        log.info("wrote %d rows to %s", sum(m.rows for m in staged), self.options.topic)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if not self.owned:
            return
        client = ThriftTxClient(self.options.require_tx_server())
        try:
            client.abort(decode_transaction(self.transaction))  # a long one: invalidated
        finally:
            client.close()


class TmsStreamWriter(DataSourceStreamWriter):
    """Streaming writes (see the module docstring). Spark makes one on the driver for
    every commit, so it holds no state of its own."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        if options.writer_id is None:
            raise TmsInvalidArgumentError(
                "a streaming write to tms needs the writerId or checkpointLocation option"
            )
        self.options = options
        self.columns = _columns(schema)
        _check_topic(options)

    def write(self, iterator: Iterator[Row]) -> StagedRows:
        partition, attempt = _task()
        client = ThriftTxClient(self.options.require_tx_server())
        own: list[Transaction] = []

        def pointer() -> int:
            own.append(client.start_short(self.options.task_timeout_s))
            return own[0].write_pointer

        try:
            wp, count = _stage(self.options, _pairs(iterator, self.columns), pointer)
        except BaseException:
            for tx in own:  # invalidated: its staged rows must never be shown by a marker
                client.invalidate(tx.transaction_id)
            raise
        finally:
            client.close()
        return StagedRows(
            partition, attempt, wp, count, encode_transaction(own[0]) if own else None
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        staged = [m for m in _staged(messages) if m.transaction is not None]
        if not staged:
            return
        client = ThriftTxClient(self.options.require_tx_server())
        try:
            for m in staged:
                assert m.transaction is not None
                tx = decode_transaction(m.transaction)
                client.can_commit_or_throw(tx, [])
                client.commit_or_throw(tx)
        finally:
            client.close()
        pointers = [m.write_pointer for m in staged if m.write_pointer is not None]
        with MessagingClient(self.options.url, token=self.options.token) as messaging:
            outcome = messaging.publish_markers(
                self.options.topic, pointers, idempotency_key=f"{self.options.writer_id}:{batchId}"
            )
        if outcome.duplicate:
            log.info("batch %d of %s was published before", batchId, self.options.writer_id)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        client = ThriftTxClient(self.options.require_tx_server())
        try:
            for m in _staged(messages):
                if m.transaction is not None:  # invalidated, as in write()
                    client.invalidate(decode_transaction(m.transaction).transaction_id)
        finally:
            client.close()
