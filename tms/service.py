"""``MessagingService``: topics, publishing, rollback and consumption over the tables.

Contract (every method thread-safe; errors from ``tms.errors``):

* topics: ``create_topic`` (409 if it exists), ``update_topic`` (replaces the properties,
  keeps the generation), ``get_topic``, ``list_topics``, ``delete_topic`` (the generation
  is negated at once: the old data is invisible from then on and cleaned up later; a new
  create starts the next generation). Unknown or deleted topics raise
  ``TopicNotFoundError``.
* ``publish`` returns only once the messages are durable; the ``RollbackDetail`` of a
  transactional publish is what ``rollback`` takes. ``store`` stages payloads under a write
  pointer; an empty transactional ``publish`` is the commit marker that makes them
  visible. ``write`` takes many of these for one topic at once (one group commit), each
  with its own outcome. Transactional publish and store are refused
  (``TransactionTooOldError``) once the transaction is older than ``tx_max_lifetime_s``:
  its id may already have been truncated from the invalid list. Every transactional
  write, marker and rollback is checked by the ``guard`` (``tms.guard``): only pointers
  the transaction manager issued and holds in progress (``TransactionNotInProgressError``,
  or ``TransactionServiceError`` when it cannot be asked); without a transaction
  service only pointers from the future are refused (``ClockGuard``).
* ``topic_stats`` / ``namespace_stats``: what topics hold (``tms.stats``; bounded cost,
  estimates beyond a size).
* ``fetch`` reads with ``tms.fetcher`` semantics and returns a ``FetchResult``;
  ``bounds`` says where such a read would start and stop, reading no payloads.
* long-poll: ``version(topic)`` changes whenever the topic gets new (or rolled-back)
  entries; ``wait_for_change`` blocks until it moves past a version or a timeout, and
  ``add_listener`` tells event loops without blocking a thread. ``transactions_finished``
  tells ``add_finish_listener``s that transactions are no longer in progress (a
  publisher's post-commit step says so), to wake readers held behind them.
* ``subscriptions``: the topics' subscriptions (``tms.subscriptions``); deleting a topic
  deletes them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

from tms.codec import keys
from tms.config import TmsConfig
from tms.errors import TmsError, TopicNotFoundError, TransactionTooOldError
from tms.fetcher import FetchRequest, MessageFetcher, scan_bounds
from tms.guard import ClockGuard, Use, WritePointerGuard
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
from tms.stats import TopicStats, topic_stats
from tms.store.kv import KeyValueStore
from tms.store.subscriptions import KvSubscriptionStore, SubscriptionStore
from tms.store.tables import Tables
from tms.subscriptions import Subscriptions
from tms.writer import BatchStats, TopicWriter
from txn.clock import SYSTEM_CLOCK, Clock
from txn.transaction import MAX_TX_PER_MS

__all__ = ["FetchResult", "FinishListener", "MessagingService", "TopicListener", "WriteOperation"]

log = logging.getLogger(__name__)

WriteOperation = tuple[str, Any]
"""``("publish" | "store", StoreRequest)``, ``("rollback", RollbackDetail)``,
``("markers", MarkersRequest)``, or a subscription's transactional position:
``("position", tms.positions.PositionWrite)``, ``("unposition", PositionRollback)``."""

TopicListener = Callable[[TopicId, int], None]
"""Called with (topic, new version) after new entries landed; on the writer's thread."""

FinishListener = Callable[[TopicId, Sequence[int]], None]
"""Called with (topic, write pointers) when transactions that wrote to it finished."""


@dataclass(frozen=True, slots=True)
class FetchResult:
    """``held``: the read stopped at an entry of a transaction the reader cannot see yet
    (a newer transaction snapshot is needed to pass it)."""

    messages: list[Message]
    held: bool
    version: int


def _pointers(kind: str, arg: Any) -> list[tuple[int, Use]]:
    """The write pointers an operation writes or rolls back under, with their use."""
    if kind in ("publish", "store"):
        wp = arg.tx_write_pointer
        return [] if wp is None else [(wp, Use.WRITE)]
    if kind == "markers":
        return [(wp, Use.MARKER) for wp in arg.write_pointers]
    if kind == "rollback":
        return [(arg.tx_write_pointer, Use.ROLLBACK)]
    if kind == "position":
        return [(arg.write_pointer, Use.WRITE)]
    if kind == "unposition":
        return [(arg.write_pointer, Use.ROLLBACK)]
    return []


class MessagingService:
    """See the module docstring."""

    def __init__(
        self,
        store: KeyValueStore,
        config: TmsConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        metrics: TmsMetrics | None = None,
        guard: WritePointerGuard | None = None,
        subscription_store: SubscriptionStore | None = None,
    ) -> None:
        self.config = config or TmsConfig()
        self.guard = guard or ClockGuard(clock, self.config.tx_clock_skew_s)
        self.tables = Tables(store)
        self.metrics = metrics or TmsMetrics()
        self._clock = clock
        self._lock = threading.Lock()
        self._topics: dict[TopicId, TopicMetadata] = {}
        self._epoch = self.tables.kv.epoch
        self._writers: dict[tuple[TopicId, int], TopicWriter] = {}
        self._versions: dict[TopicId, int] = {}
        self._changed = threading.Condition(self._lock)
        self._listeners: list[TopicListener] = []
        self._finish_listeners: list[FinishListener] = []
        self._closed = False
        self.metrics.watch_topic_sizes(self.topic_sizes)
        self.subscriptions = Subscriptions(self, subscription_store or KvSubscriptionStore(store))
        """The topics' subscriptions (``tms.subscriptions``); their records live in
        ``subscription_store`` (default: this store, ``KvSubscriptionStore``)."""
        self.metrics.watch_subscription_lags(self.subscriptions.all_lags)

    def now_ms(self) -> int:
        """The service's clock."""
        return self._clock.now_ms()

    # -- topics -------------------------------------------------------------------------

    def create_topic(
        self, topic: TopicId, properties: Mapping[str, str] | None = None
    ) -> TopicMetadata:
        props = {"ttl": str(self.config.default_ttl_s), **(properties or {})}
        props.pop("generation", None)
        metadata = self.tables.metadata.create(topic, props)
        with self._lock:
            self._topics[topic] = metadata
        return metadata

    def update_topic(self, topic: TopicId, properties: Mapping[str, str]) -> TopicMetadata:
        props = {"ttl": str(self.config.default_ttl_s), **properties}
        props.pop("generation", None)
        metadata = self.tables.metadata.update(topic, props)
        with self._lock:
            self._topics[topic] = metadata
            writer = self._writers.get((topic, metadata.generation))
            if writer is not None:
                writer.metadata = metadata
        return metadata

    def delete_topic(self, topic: TopicId) -> None:
        deleted = self.tables.metadata.delete(topic)
        with self._lock:
            self._topics.pop(topic, None)
            writer = self._writers.pop((topic, -deleted.generation), None)
            self._bump(topic)
        if writer is not None:
            writer.close()
        self.subscriptions.topic_deleted(topic)

    def get_topic(self, topic: TopicId) -> TopicMetadata:
        with self._lock:
            if self._epoch != self.tables.kv.epoch:
                # The store recovered from a failed write, which may have landed after
                # all (a topic deleted after all): read every topic again.
                self._epoch = self.tables.kv.epoch
                self._topics.clear()
            cached = self._topics.get(topic)
        if cached is not None:
            return cached
        metadata = self.tables.metadata.get(topic)
        with self._lock:
            self._topics[topic] = metadata
        return metadata

    def topic_sizes(self) -> list[tuple[TopicId, int]]:
        """Approximate bytes stored per live topic (``KeyValueStore.approximate_size``)."""
        return [
            (m.topic, self.tables.topic_bytes(keys.topic_prefix(m.topic, m.generation)))
            for m in self.tables.metadata.scan_all()
            if m.exists
        ]

    def list_topics(self, namespace: str) -> list[TopicId]:
        return self.tables.metadata.list_topics(validate_namespace(namespace))

    def topic_stats(self, topic: TopicId) -> TopicStats:
        """Messages, bytes, first/last publish and rate of a topic (``tms.stats``), and
        how many subscriptions it has with the largest of their lags."""
        metadata = self.get_topic(topic)
        stats = topic_stats(self.tables, metadata, self.now_ms())
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

    def publish(self, request: StoreRequest) -> RollbackDetail | None:
        result: RollbackDetail | None = self.write_one(request.topic, "publish", request)
        return result

    def store(self, request: StoreRequest) -> None:
        self.write_one(request.topic, "store", request)

    def rollback(self, topic: TopicId, detail: RollbackDetail) -> int:
        """Roll back a transactional publish in the topic's current generation; the
        number of entries negated."""
        count: int = self.write_one(topic, "rollback", detail)
        return count

    def publish_markers(self, request: MarkersRequest) -> MarkersResult:
        """Commit markers for several write pointers at once (see ``MarkersRequest``)."""
        result: MarkersResult = self.write_one(request.topic, "markers", request)
        return result

    def write(self, topic: TopicId, operations: Sequence[WriteOperation]) -> list[Any]:
        """Several publishes, stores and rollbacks of ``topic`` in one group commit: for
        each, in order, its result (as the methods above return) or the ``TmsError`` it
        failed with; one failing does not fail the others."""
        started = time.perf_counter()
        outcomes: list[Any] = [None] * len(operations)
        checked: list[int] = []
        uses: list[tuple[int, Use]] = []
        owners: list[int] = []  # the operation of each use
        for i, (kind, arg) in enumerate(operations):
            try:
                for wp, use in _pointers(kind, arg):
                    if use is not Use.ROLLBACK:
                        self._check_lifetime(wp)
                    uses.append((wp, use))
                    owners.append(i)
            except TmsError as exc:
                outcomes[i] = exc
            else:
                checked.append(i)
        # Only pointers the transaction manager issued (tms.guard); nothing is asked for
        # non-transactional writes, which go on while the transaction service is down.
        for i, refusal in zip(owners, self.guard.check(uses) if uses else (), strict=True):
            if refusal is not None and outcomes[i] is None:
                outcomes[i] = refusal
        accepted = [i for i in checked if outcomes[i] is None]
        if accepted:
            try:
                results = self._writer(topic).submit([operations[i] for i in accepted])
            except TmsError as exc:
                results = [exc] * len(accepted)
            for i, result in zip(accepted, results, strict=True):
                outcomes[i] = result
        elapsed = time.perf_counter() - started
        m = self.metrics
        for (kind, _arg), outcome in zip(operations, outcomes, strict=True):
            m.operation(kind, None if isinstance(outcome, TmsError) else elapsed)
        return outcomes

    def write_one(self, topic: TopicId, kind: str, arg: Any) -> Any:
        """One operation of ``write``: its result, or its error raised."""
        outcome = self.write(topic, [(kind, arg)])[0]
        if isinstance(outcome, TmsError):
            raise outcome
        return outcome

    def _check_lifetime(self, wp: int) -> None:
        started_ms = wp // MAX_TX_PER_MS
        lifetime_ms = self.config.tx_max_lifetime_s * 1000
        if started_ms + lifetime_ms <= self._clock.now_ms():
            raise TransactionTooOldError(
                f"Transaction {wp} has exceeded max lifetime {lifetime_ms} ms"
            )

    def _writer(self, topic: TopicId) -> TopicWriter:
        epoch = self.tables.kv.epoch  # before the metadata is read: see TopicWriter.epoch
        metadata = self.get_topic(topic)
        key = (topic, metadata.generation)
        with self._lock:
            if self._closed:
                raise TmsError("the messaging service is closed")
            writer = self._writers.get(key)
            if writer is None or writer.stale:
                writer = TopicWriter(
                    self.tables, metadata, self._clock, on_batch=self._on_batch, epoch=epoch
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
        if stats.published:
            with self._lock:
                version = self._bump(metadata.topic)
            for listener in list(self._listeners):
                try:
                    listener(metadata.topic, version)
                except Exception:
                    log.exception("topic listener failed")

    # -- reading ------------------------------------------------------------------------

    def fetch(self, topic: TopicId, request: FetchRequest | None = None) -> FetchResult:
        """Read ``topic``; ``version`` is the topic's version before the read (wait on it
        when the result is empty or held)."""
        started = time.perf_counter()
        metadata = self.get_topic(topic)
        version = self.version(topic)
        fetcher = MessageFetcher(
            self.tables, metadata, request or FetchRequest(), self._clock.now_ms()
        )
        messages = list(fetcher)
        self.metrics.fetched(topic, len(messages), sum(map(len, map(itemgetter(1), messages))))
        self.metrics.operation("fetch", time.perf_counter() - started)
        return FetchResult(messages, fetcher.held, version)

    def bounds(self, topic: TopicId, request: FetchRequest | None = None) -> TopicBounds:
        """Where a read would start and stop (``tms.fetcher.TopicBounds``), without reading
        payloads: how a reader plans parallel reads of one consistent snapshot."""
        metadata = self.get_topic(topic)
        return scan_bounds(self.tables, metadata, request or FetchRequest(), self.now_ms())

    # -- change notification --------------------------------------------------------------

    def _bump(self, topic: TopicId) -> int:
        version = self._versions.get(topic, 0) + 1
        self._versions[topic] = version
        self._changed.notify_all()
        return version

    def version(self, topic: TopicId) -> int:
        with self._lock:
            return self._versions.get(topic, 0)

    def wait_for_change(self, topic: TopicId, version: int, timeout_s: float) -> int:
        """Block until ``topic``'s version differs from ``version`` or the timeout passes;
        return the version now."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._versions.get(topic, 0) == version and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self._versions.get(topic, 0)

    def add_listener(self, listener: TopicListener) -> None:
        self._listeners.append(listener)

    def transactions_finished(self, topic: TopicId, write_pointers: Sequence[int]) -> None:
        """Tell the finish listeners that these transactions, which wrote to ``topic``,
        are no longer in progress (a hint: readers held behind them can read on with a
        new transaction; listeners check it where it matters)."""
        for listener in list(self._finish_listeners):
            try:
                listener(topic, write_pointers)
            except Exception:
                log.exception("finish listener failed")

    def add_finish_listener(self, listener: FinishListener) -> None:
        self._finish_listeners.append(listener)

    def remove_finish_listener(self, listener: FinishListener) -> None:
        self._finish_listeners.remove(listener)

    def remove_listener(self, listener: TopicListener) -> None:
        self._listeners.remove(listener)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            writers = list(self._writers.values())
            self._writers.clear()
            self._changed.notify_all()
        for writer in writers:
            writer.close()
        self.tables.close()
