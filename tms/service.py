"""``MessagingService``: topics, writes, reads and maintenance over the tables — the one
door to the messaging core for the REST service, cleanup, inspection and the tools.

Contract (every method thread-safe unless marked; errors from ``tms.errors``):

* topics: ``create_topic`` (409 if it exists), ``update_topic`` (replaces the properties,
  keeps the generation), ``get_topic``, ``list_topics``, ``delete_topic`` (the generation
  is negated at once: the old data is invisible from then on and cleaned up later; a new
  create starts the next generation). Unknown or deleted topics raise
  ``TopicNotFoundError``.
* writes are operations (``tms.operations``: publish, store, rollback, markers), each
  group-committed by its topic's writer (``tms.writer``) and answered only once durable:
  ``submit`` from a thread, ``await submit_async`` from an event loop (never blocking
  it: the batch is written on the service's writer threads), ``write`` for several at
  once, each with its own outcome. ``publish``, ``store``, ``rollback`` and
  ``publish_markers`` are ``submit`` of one operation. Transactional writes are refused
  once the transaction is older than ``tx_max_lifetime_s`` (``TransactionTooOldError``),
  and checked by the ``guard`` (``tms.guard``): only pointers the transaction manager
  issued and holds in progress (``TransactionNotInProgressError``, or
  ``TransactionServiceError`` when it cannot be asked); without a transaction service
  only pointers from the future are refused (``ClockGuard``).
* several instances on one store tell each other of changes through ``feed``
  (``tms.changes.ChangeFeed``): a long-poll on one wakes on a write made through another.
* reads: ``read`` starts a read (``tms.fetcher`` semantics) to iterate, ``fetch`` reads
  into a ``FetchResult``, ``bounds`` says where a read would start and stop without
  reading payloads, ``inspect`` shows the raw rows and ``recent_messages`` the newest
  messages with their status (``tms.inspect``).
* ``topic_stats`` / ``namespace_stats``: what topics hold (``tms.stats``; bounded cost,
  estimates beyond a size).
* long-poll: ``version(topic)`` changes whenever the topic gets new (or rolled-back)
  entries; ``wait_for_change`` blocks until it moves past a version or a timeout, and
  ``add_listener`` tells event loops without blocking a thread (``tms.changes``).
  ``transactions_finished`` tells ``add_finish_listener``s that transactions are no
  longer in progress (a publisher's post-commit step says so), to wake readers held
  behind them.
* ``subscriptions``: the topics' subscriptions (``tms.subscriptions``), their records in
  a ``SubscriptionStore``; deleting a topic deletes them.
* queues (topics with ``kind=queue``, ``tms.queues``): ``enqueue``, ``receive``, ``ack``,
  ``nack``, ``settle`` are ``submit`` of their operation; ``queue_stats`` counts the
  messages per state, ``inspect`` lists them with their lease state, and
  ``maintain_queues`` runs every queue's housekeeping (the cleanup loop calls it).
  Reads of a queue (``read``, ``fetch``, ``bounds``) and topic writes to it are refused.
* maintenance, for cleanup: ``all_topics``, ``purge_topic``, ``negate_invalid``.
* several instances on one shared store: every write of a topic, its metadata row's
  too, by the topic's owner only, under its fence (``tms.ownership``); reads by any
  instance, the topic's metadata read from the store each time.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, TypeVar

from tms.changes import ChangeFeed, FinishListener, TopicChanges, TopicListener
from tms.config import TmsConfig
from tms.errors import TmsError, TmsInvalidArgumentError, TopicNotFoundError
from tms.fetcher import FetchRequest, MessageFetcher, scan_bounds
from tms.guard import ClockGuard, WritePointerGuard
from tms.ids import MessageId
from tms.inspect import inspect_queue, inspect_topic, recent_messages
from tms.metrics import TmsMetrics
from tms.model import (
    MarkersRequest,
    MarkersResult,
    Message,
    RollbackDetail,
    StoreRequest,
    TopicBounds,
    TopicId,
    TopicMetadata,
    validate_namespace,
)
from tms.operations import (
    Markers,
    Operation,
    Publish,
    Rollback,
    Store,
    Ticket,
)
from tms.ownership import Ownership, fenced, given_up, stale
from tms.queues import QueueConfig
from tms.service_loop import LoopSubmit
from tms.service_queues import QueueMethods
from tms.stats import TopicStats, topic_stats
from tms.store.kv import KeyValueStore
from tms.store.subscriptions import KvSubscriptionStore, SubscriptionStore
from tms.store.tables import PurgeCounts, Tables
from tms.subscriptions import Subscriptions
from tms.writer import BatchStats, TopicWriter
from txms_common.clock import SYSTEM_CLOCK, Clock
from txn.transaction import Transaction

__all__ = ["FetchResult", "FinishListener", "MessagingService", "Ownership", "TopicListener"]

R = TypeVar("R")

_WRITER_THREADS = 64


@dataclass(frozen=True, slots=True)
class FetchResult:
    """``held``: the read stopped at an entry of a transaction the reader cannot see yet
    (a newer transaction snapshot is needed to pass it)."""

    messages: list[Message]
    held: bool
    version: int


class MessagingService(QueueMethods, LoopSubmit):
    """See the module docstring."""

    def __init__(
        self,
        store: KeyValueStore,
        config: TmsConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        metrics: TmsMetrics | None = None,
        guard: WritePointerGuard | None = None,
        ownership: Ownership | None = None,
        feed: ChangeFeed | None = None,
        rng: random.Random | None = None,
        subscription_store: SubscriptionStore | None = None,
    ) -> None:
        """``rng``: the jitter of queue back-offs (tests seed it)."""
        self.config = config or TmsConfig()
        self.ownership = ownership
        self._feed = feed
        self.guard = guard or ClockGuard(clock, self.config.tx_clock_skew_s)
        self.metrics = metrics or TmsMetrics()
        self._tables = Tables(store)
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._topics: dict[TopicId, TopicMetadata] = {}
        self._epoch = self._tables.epoch
        self._writers: dict[tuple[TopicId, int], TopicWriter] = {}
        self._changes = TopicChanges()
        self._opening = {}  # writers being opened for event loops (LoopSubmit)
        # Leads write batches for event-loop callers, a batch at a time (as many topics
        # as have one under way at once; threads start only as needed), and opens their
        # writers.
        self._executor = ThreadPoolExecutor(_WRITER_THREADS, thread_name_prefix="tms-writer")
        self._mover = ThreadPoolExecutor(1, thread_name_prefix="tms-dead-letters")
        self._closed = False
        self.metrics.watch_topic_sizes(self.topic_sizes)
        self.metrics.watch_queues(self.queues_stats, clock.now_ms)
        self.subscriptions = Subscriptions(
            self, self._tables, subscription_store or KvSubscriptionStore(store)
        )
        """The topics' subscriptions (``tms.subscriptions``); their records live in
        ``subscription_store`` (default: this store, ``KvSubscriptionStore``)."""
        self.metrics.watch_subscription_lags(self.subscriptions.all_lags)
        if feed is not None:
            feed.start(self._announced, self._changes.bump_all)

    def now_ms(self) -> int:
        """The service's clock."""
        return self._clock.now_ms()

    # -- topics -------------------------------------------------------------------------

    def create_topic(
        self, topic: TopicId, properties: Mapping[str, str] | None = None
    ) -> TopicMetadata:
        props = {"ttl": str(self.config.default_ttl_s), **(properties or {})}
        props.pop("generation", None)
        self._check_queue(topic, props)  # valid queue settings, if a queue
        with fenced(self.ownership, topic) as fence:
            metadata = self._tables.metadata.create(topic, props, fence)
        with self._lock:
            self._topics[topic] = metadata
        return metadata

    def update_topic(self, topic: TopicId, properties: Mapping[str, str]) -> TopicMetadata:
        props = {"ttl": str(self.config.default_ttl_s), **properties}
        props.pop("generation", None)
        if (self._check_queue(topic, props) is None) != (self.queue_config(topic) is None):
            raise TmsInvalidArgumentError(f"the kind of {topic} (topic or queue) cannot change")
        with fenced(self.ownership, topic) as fence:
            metadata = self._tables.metadata.update(topic, props, fence)
        with self._lock:
            self._topics[topic] = metadata
            writer = self._writers.get((topic, metadata.generation))
            if writer is not None:
                writer.metadata = metadata
        return metadata

    def delete_topic(self, topic: TopicId) -> None:
        with fenced(self.ownership, topic) as fence:
            deleted = self._tables.metadata.delete(topic, fence)
        with self._lock:
            self._topics.pop(topic, None)
            writer = self._writers.pop((topic, -deleted.generation), None)
        self._changes.bump(topic)
        if self._feed is not None:
            self._feed.announce(topic)
        if writer is not None:
            writer.close()
        self.subscriptions.topic_deleted(topic)

    def get_topic(self, topic: TopicId) -> TopicMetadata:
        if self.ownership is not None:
            # another instance may have changed it: never from a cache
            return self._tables.metadata.get(topic)
        with self._lock:
            if self._epoch != self._tables.epoch:
                # The store recovered from a failed write, which may have landed after
                # all (a topic deleted after all): read every topic again.
                self._epoch = self._tables.epoch
                self._topics.clear()
            cached = self._topics.get(topic)
        if cached is not None:
            return cached
        metadata = self._tables.metadata.get(topic)
        with self._lock:
            self._topics[topic] = metadata
        return metadata

    def topic_sizes(self) -> list[tuple[TopicId, int]]:
        """Approximate bytes stored per live topic (``KeyValueStore.approximate_size``)."""
        return [
            (m.topic, self._tables.topic_bytes(m))
            for m in self._tables.metadata.scan_all()
            if m.exists
        ]

    def list_topics(self, namespace: str) -> list[TopicId]:
        return self._tables.metadata.list_topics(validate_namespace(namespace))

    def topic_stats(self, topic: TopicId) -> TopicStats:
        """Messages, bytes, first/last publish and rate of a topic (``tms.stats``), and
        how many subscriptions it has with the largest of their lags."""
        metadata = self.get_topic(topic)
        stats = topic_stats(self._tables, metadata, self.now_ms())
        lags = [lag.messages for _sub, lag in self.subscriptions.topic_lags(metadata)]
        return replace(stats, subscriptions=len(lags), max_lag=max(lags, default=None))

    def namespace_stats(self, namespace: str) -> list[TopicStats]:
        """``topic_stats`` of every topic of a namespace, in name order (a topic deleted
        meanwhile is left out)."""
        stats = []
        for topic in self.list_topics(namespace):
            try:
                stats.append(self.topic_stats(topic))
            except TopicNotFoundError:
                continue
        return stats

    # -- writing ------------------------------------------------------------------------

    def submit(self, op: Operation[R]) -> R:
        """Write ``op`` (see the module docstring); its result once durable."""
        started = time.perf_counter()
        ticket = Ticket(op)
        try:
            self._writer(op.topic).submit([ticket])
        except TmsError as exc:
            ticket.fail(exc)
        self.finished(ticket, started)
        return ticket.result()

    def write(self, operations: Sequence[Operation[object]]) -> list[Ticket[object]]:
        """Several operations, each topic's in one group commit: a ticket per operation,
        in order, with its result or the ``TmsError`` it failed with; one failing does
        not fail the others."""
        started = time.perf_counter()
        tickets = [Ticket(op) for op in operations]
        by_topic: dict[TopicId, list[Ticket[object]]] = {}
        for ticket in tickets:
            by_topic.setdefault(ticket.op.topic, []).append(ticket)
        for topic, group in by_topic.items():
            try:
                self._writer(topic).submit(group)
            except TmsError as exc:
                for ticket in group:
                    ticket.fail(exc)
        for ticket in tickets:
            self.finished(ticket, started)
        return tickets

    def publish(self, request: StoreRequest) -> RollbackDetail | None:
        return self.submit(Publish(request))

    def store(self, request: StoreRequest) -> None:
        self.submit(Store(request))

    def rollback(self, topic: TopicId, detail: RollbackDetail) -> int:
        """Roll back a transactional publish in the topic's current generation; the
        number of entries negated."""
        return self.submit(Rollback(topic, detail))

    def publish_markers(self, request: MarkersRequest) -> MarkersResult:
        """Commit markers for several write pointers at once (see ``MarkersRequest``)."""
        return self.submit(Markers(request))

    def _open_writer(self, topic: TopicId) -> TopicWriter | None:
        """The topic's writer if it is at hand (nothing to read from the store)."""
        with self._lock:
            metadata = self._topics.get(topic)
            if metadata is None or self._closed or self._epoch != self._tables.epoch:
                return None
            writer = self._writers.get((topic, metadata.generation))
        return writer if writer is not None and not stale(writer, self.ownership) else None

    def _writer(self, topic: TopicId) -> TopicWriter:
        # The fence first, then what the writer reads: see tms.store.kv (fences).
        fence = None if self.ownership is None else self.ownership.fence(topic)
        epoch = self._tables.epoch  # before the metadata is read: see TopicWriter.epoch
        metadata = self.get_topic(topic)
        key = (topic, metadata.generation)
        with self._lock:
            if self._closed:
                raise TmsError("the messaging service is closed")
            if fence is not None:
                self._topics[topic] = metadata  # the owner's: only it changes the row
            writer = self._writers.get(key)
            if writer is None or stale(writer, self.ownership) or writer.fence != fence:
                writer = TopicWriter(
                    self._tables,
                    metadata,
                    self._clock,
                    self.guard,
                    max_lifetime_ms=self.config.tx_max_lifetime_s * 1000,
                    executor=self._executor,
                    on_batch=self._on_batch,
                    epoch=epoch,
                    fence=fence,
                    on_fenced=functools.partial(given_up, self.ownership),
                    rng=self._rng,
                )
                self._writers[key] = writer
            return writer

    def _on_batch(self, metadata: TopicMetadata, stats: BatchStats) -> None:
        m = self.metrics
        m.batch_operations.observe(stats.operations)
        m.write_seconds.observe(stats.seconds)
        m.queue_length.set(stats.queue_length)
        if stats.messages:
            m.wrote(metadata.topic, "write", stats.messages, stats.payload_bytes)
        if stats.rolled_back:
            m.rolled_back.inc(stats.rolled_back)
        if stats.dead_lettered:
            self._move_soon(metadata.topic)
        if stats.published:
            self._changes.bump(metadata.topic)
            if self._feed is not None:
                self._feed.announce(metadata.topic)

    # -- reading ------------------------------------------------------------------------

    def local_reads(self) -> bool:
        """Whether a read now is answered by this process alone, from memory and local
        files, without waiting on another process (the store's ``local_reads``,
        ``tms.store.kv``): short enough for an event loop's thread when it reads little."""
        return bool(getattr(self._tables.kv, "local_reads", False))

    def read(
        self, topic: TopicId, request: FetchRequest | None = None, *, most_rows: int | None = None
    ) -> MessageFetcher:
        """A read of ``topic`` to iterate (lazily, in chunks if the caller likes; its
        ``held`` tells where it stopped; with ``most_rows``, its ``cut`` whether it stopped
        after passing that many rows, see ``MessageFetcher``). Counts nothing in the
        metrics: ``fetch`` does, and so must a caller of this (``metrics.fetched``)."""
        metadata = self._topic_not_queue(topic)
        return MessageFetcher(
            self._tables, metadata, request or FetchRequest(), self.now_ms(), most_rows
        )

    def fetch(self, topic: TopicId, request: FetchRequest | None = None) -> FetchResult:
        """Read ``topic``; ``version`` is the topic's version before the read (wait on it
        when the result is empty or held)."""
        started = time.perf_counter()
        metadata = self._topic_not_queue(topic)
        version = self.version(topic)
        fetcher = MessageFetcher(
            self._tables, metadata, request or FetchRequest(), self._clock.now_ms()
        )
        messages = list(fetcher)
        self.metrics.fetched(topic, len(messages), sum(map(len, map(itemgetter(1), messages))))
        self.metrics.operation("fetch", time.perf_counter() - started)
        return FetchResult(messages, fetcher.held, version)

    def bounds(self, topic: TopicId, request: FetchRequest | None = None) -> TopicBounds:
        """Where a read would start and stop (``tms.fetcher.TopicBounds``), without reading
        payloads: how a reader plans parallel reads of one consistent snapshot."""
        metadata = self._topic_not_queue(topic)
        return scan_bounds(self._tables, metadata, request or FetchRequest(), self.now_ms())

    def inspect(
        self, topic: TopicId, start_ms: int = 0, end_ms: int | None = None, limit: int = 1000
    ) -> dict[str, Any]:
        """The raw rows of every generation of ``topic``; of a queue, its messages with
        their state (``tms.inspect``)."""
        metadata = self.get_topic(topic)
        if metadata.properties.get("kind") == QueueConfig.KIND:
            return inspect_queue(self._tables, metadata, start_ms, limit)
        return inspect_topic(self._tables, topic, start_ms, end_ms, limit)

    def recent_messages(
        self,
        topic: TopicId,
        *,
        limit: int = 50,
        before: MessageId | None = None,
        snapshot: Transaction | None = None,
    ) -> dict[str, Any]:
        """The newest messages of ``topic`` with their status against ``snapshot``
        (``tms.inspect.recent_messages``)."""
        metadata = self.get_topic(topic)
        return recent_messages(
            self._tables, metadata, limit=limit, before=before, snapshot=snapshot
        )

    # -- maintenance (cleanup) ------------------------------------------------------------

    def all_topics(self) -> list[TopicMetadata]:
        """Every topic's metadata, deleted topics (negative generation) included."""
        return self._tables.metadata.scan_all()

    def purge_topic(self, metadata: TopicMetadata, cutoff_ms: int) -> PurgeCounts:
        """Delete ``metadata``'s rows of older generations and those older than
        ``cutoff_ms`` (``Tables.purge_topic``)."""
        return self._tables.purge_topic(metadata, cutoff_ms, self.config.cleanup_batch_rows)

    def negate_invalid(
        self, metadata: TopicMetadata, invalid: Collection[int], from_ms: int
    ) -> int:
        """Durably negate the entries of ``invalid`` write pointers from ``from_ms`` on in
        the topic's current generation (``Tables.negate_invalid``); how many."""
        return self._tables.negate_invalid(
            metadata, invalid, from_ms, self.config.cleanup_batch_rows
        )

    # -- change notification --------------------------------------------------------------

    def version(self, topic: TopicId) -> int:
        return self._changes.version(topic)

    def wait_for_change(self, topic: TopicId, version: int, timeout_s: float) -> int:
        """Block until ``topic``'s version differs from ``version`` or the timeout passes;
        return the version now."""
        return self._changes.wait_for_change(topic, version, timeout_s)

    def add_listener(self, listener: TopicListener) -> None:
        self._changes.add_listener(listener)

    def remove_listener(self, listener: TopicListener) -> None:
        self._changes.remove_listener(listener)

    def transactions_finished(self, topic: TopicId, write_pointers: Sequence[int]) -> None:
        """Tell the finish listeners that these transactions, which wrote to ``topic``,
        are no longer in progress (a hint: readers held behind them can read on with a
        new transaction; listeners check it where it matters)."""
        self._changes.finished(topic, write_pointers)

    def add_finish_listener(self, listener: FinishListener) -> None:
        self._changes.add_finish_listener(listener)

    def remove_finish_listener(self, listener: FinishListener) -> None:
        self._changes.remove_finish_listener(listener)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new writes, finish the batches under way, release waiters and the store."""
        with self._lock:
            self._closed = True
            writers = list(self._writers.values())
            self._writers.clear()
        self._mover.shutdown(wait=True, cancel_futures=True)
        for writer in writers:
            writer.close()
        self._executor.shutdown(wait=True)
        self.subscriptions.close()
        if self._feed is not None:
            self._feed.close()
        self._changes.close()
        self._tables.close()
