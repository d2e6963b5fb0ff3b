"""Streaming writes: each micro-batch appears at once, exactly once, across replays.

Per micro-batch, as for a batch job (``tms.spark.write``): one transaction, started and
held on the driver when Spark ships the writer to the batch's tasks, checkpoints per task
attempt, commit markers per topic, then the commit. What streaming adds is the replay:
Spark re-runs a batch whose commit it had not recorded (the driver died, the query was
stopped), and the sink must publish it once.

The markers of the batch's first topic (by name) are published with the idempotency key
``<query id>:<batch id>``, and with the transaction's own id as their first pointer (it
staged nothing: an empty marker that names the transaction). The query id is Spark's, kept
in the checkpoint (tasks read it from their local properties): a replay of the same
checkpoint reuses the key, a fresh checkpoint gets a new query id and never collides. If
the service answers "duplicate", an earlier attempt of this batch published under that
key; its transaction (named by the first marker) decides:

* committed: the batch is in the topic; this attempt's staged rows are dropped (its
  transaction is aborted: it published nothing);
* invalid: that attempt failed for good (invalidated by its driver, by the lease keeper
  when the driver died, or timed out); this attempt publishes under the next key,
  ``<query id>:<batch id>#1`` (then ``#2`` ...);
* in progress (its driver died after the markers and before the commit, and it has not
  timed out yet): it is invalidated now, and this attempt takes the next key.

The other topics of the batch are then published with the key chosen for the first.
A "duplicate" that names this attempt's own transaction (or pointers) is this attempt's
own request, retried by the client after its answer was lost: it is published.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from tms.errors import TmsError
from tms.spark.lease import LeaseRegistry
from tms.spark.options import SourceOptions
from tms.spark.write import (
    Columns,
    StagedRows,
    check_topic,
    end_transaction,
    markers_by_topic,
    stage_attempt,
    staged,
    start_held,
    task_context,
)
from txn.codec import decode_transaction
from txn.transaction import Transaction

if TYPE_CHECKING:
    from txn.rpc.client import ThriftTxClient

__all__ = ["TmsStreamWriter"]

log = logging.getLogger(__name__)

QUERY_ID = "sql.streaming.queryId"
"""The task-local property where Spark puts the streaming query's id."""
_MAX_ATTEMPTS = 1000


class TmsStreamWriter(DataSourceStreamArrowWriter):
    """See the module docstring. Spark makes one on the driver per micro-batch for the
    tasks (pickled: the batch's transaction starts then) and another to commit or abort
    it (never pickled: it learns the transaction from the tasks' messages)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = Columns.of(schema, options)
        self.transaction: bytes | None = None
        check_topic(options)

    @property
    def _tag(self) -> str | None:
        """Groups the leases of one query (its checkpoint), for an abort that cannot
        name its transaction."""
        location = self.options.checkpoint_location
        return hashlib.sha256(location.encode()).hexdigest()[:24] if location else None

    def __getstate__(self) -> dict[str, Any]:
        if self.transaction is None:
            self.transaction = start_held(self.options, self._tag)
        return self.__dict__.copy()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        _partition, _attempt, ctx = task_context()
        query = ctx.getLocalProperty(QUERY_ID) if ctx is not None else None
        if not query:
            raise TmsError("a streaming write to tms runs in a streaming query only")
        assert self.transaction is not None
        return stage_attempt(self.options, self.transaction, iterator, self.columns, query)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        done = staged(messages)
        if not done:
            self._abort_tagged()
            return
        tx = decode_transaction(done[0].transaction)
        pointers = markers_by_topic(done)
        if not pointers:  # an empty batch: nothing was published under the transaction
            self._abort_unpublished(tx)
            return
        try:
            published = self._publish(tx, pointers, f"{done[0].query}:{batchId}")
        except BaseException:
            end_transaction(self.options, tx, commit=False)
            raise
        if published:
            end_transaction(self.options, tx, commit=True)
        else:
            log.info("batch %d of query %s was published before", batchId, done[0].query)
            self._abort_unpublished(tx)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        done = staged(messages)
        if done:
            end_transaction(self.options, decode_transaction(done[0].transaction), commit=False)
        else:
            self._abort_tagged()

    def _abort_unpublished(self, tx: Transaction) -> None:
        """End a transaction under which no marker was published: a plain abort."""
        client = self.options.tx_client()
        try:
            client.abort(tx)
        finally:
            client.close()
            LeaseRegistry().release(tx.transaction_id)

    def _abort_tagged(self) -> None:
        """Every task failed before reporting its transaction: end the query's held ones."""
        tag = self._tag
        if tag is None:
            return  # held until the driver is gone (no checkpointLocation to find it by)
        for lease in LeaseRegistry().take_tagged(tag):
            client = self.options.tx_client(lease.tx_server)
            try:
                client.invalidate(lease.tx_id)
            except Exception:
                log.warning("could not invalidate %d; it will time out", lease.tx_id)
            finally:
                client.close()

    def _publish(self, tx: Transaction, pointers: dict[str, list[int]], key: str) -> bool:
        """Publish the batch's markers (see the module docstring); False when an earlier
        attempt of this batch committed it."""
        names = sorted(pointers)
        lead = self.options.topic_id(names[0])
        with self.options.messaging() as messaging:
            tx_client = self.options.tx_client()
            try:
                for attempt in itertools.count():
                    if attempt >= _MAX_ATTEMPTS:
                        raise TmsError(f"batch {key}: too many failed attempts")
                    chosen = key if attempt == 0 else f"{key}#{attempt}"
                    outcome = messaging.publish_markers(
                        lead, [tx.transaction_id, *pointers[names[0]]], idempotency_key=chosen
                    )
                    earlier = outcome.tokens[0].detail.tx_write_pointer
                    if not outcome.duplicate or earlier == tx.transaction_id:
                        break  # published; or by this very request, its answer lost
                    if _committed_or_invalidated(tx_client, earlier):
                        return False
            finally:
                tx_client.close()
            for name in names[1:]:
                other = messaging.publish_markers(
                    self.options.topic_id(name), pointers[name], idempotency_key=chosen
                )
                if (
                    other.duplicate
                    and other.tokens[0].detail.tx_write_pointer not in pointers[name]
                ):
                    raise TmsError(
                        f"batch {key}: topic {name} was published by an attempt that did not "
                        "publish the same topics first (a query that is not deterministic)"
                    )
        return True


def _committed_or_invalidated(client: ThriftTxClient, tx_id: int) -> bool:
    """True if transaction ``tx_id`` committed; else make sure it is invalid (False)."""
    probe = client.start_short()
    client.abort(probe)
    if probe.is_invalid(tx_id):
        return False
    if probe.is_visible(tx_id):
        return True
    if client.invalidate(tx_id):  # in progress: its driver is gone, or about to fail
        return False
    probe = client.start_short()  # it ended meanwhile
    client.abort(probe)
    return probe.is_visible(tx_id) and not probe.is_invalid(tx_id)
