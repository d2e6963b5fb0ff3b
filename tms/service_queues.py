"""The queue methods of ``MessagingService`` (``tms.queues``), a base class of it: each
write is ``submit`` of its operation (``tms.operations``), applied by the queue's topic
writer; the rest reads the queue tables (``tms.store.queues``). ``move_dead_letters``
drives the moves to dead-letter queues (``tms.queue_dead``): after each batch that
made messages MOVING (on one thread of its own), and from ``maintain_queues``.

With several instances (``ownership``), a queue's writes go to its owner like a topic's
(``NotOwnerError``: REST answers 307), and its housekeeping — ``maintain_queues``,
the counts behind the metrics (``queues_stats``), cleanup's settling — runs only where
it may write: queues owned by another live instance are left to it; a queue nobody owns
is claimed by the first instance that looks after it (its owner died: its leases and
pending work are in the store, and the new owner carries on from them)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, TypeVar

from tms.codec import keys
from tms.errors import TmsError, TmsInvalidArgumentError, TopicNotFoundError
from tms.model import TopicId, TopicMetadata
from tms.operations import (
    Ack,
    DeadLetterDone,
    DeadLetterIn,
    Enqueue,
    Maintain,
    Nack,
    Operation,
    Receive,
    Settle,
    Ticket,
)
from tms.ownership import Ownership
from tms.queues import (
    AckOutcome,
    AckRequest,
    Enqueued,
    EnqueueRequest,
    NackRequest,
    QueueConfig,
    QueueStats,
    ReceiveRequest,
    ReceiveResult,
    SettleRequest,
)
from tms.store.tables import Tables

__all__ = ["QueueMethods"]

log = logging.getLogger(__name__)
R = TypeVar("R")
_MOVE_BATCH = 1000


class QueueMethods:
    """See the module docstring (and ``MessagingService``)."""

    _tables: Tables
    _mover: Executor
    ownership: Ownership | None

    if TYPE_CHECKING:  # MessagingService's

        def get_topic(self, topic: TopicId) -> TopicMetadata: ...

        def submit(self, op: Operation[R]) -> R: ...

        def write(self, operations: list[Operation[object]]) -> list[Ticket[object]]: ...

    def _topic_not_queue(self, topic: TopicId) -> TopicMetadata:
        metadata = self.get_topic(topic)
        if metadata.properties.get("kind") == QueueConfig.KIND:
            raise TmsInvalidArgumentError(f"{topic} is a queue: receive from it, do not poll")
        return metadata

    def _check_queue(self, topic: TopicId, properties: Mapping[str, str]) -> QueueConfig | None:
        """The queue settings of new ``properties`` of ``topic`` (None: not a queue);
        ``TmsInvalidArgumentError`` for bad ones, a dead-letter queue that is the queue
        itself or not an existing queue among them."""
        config = QueueConfig.of(properties)
        dlq = config.dead_letter_queue if config is not None else None
        if dlq is not None:
            target = TopicId(topic.namespace, dlq)
            if target == topic:
                raise TmsInvalidArgumentError("a queue cannot be its own dead-letter queue")
            try:
                is_queue = self.queue_config(target) is not None
            except TopicNotFoundError:
                is_queue = False
            if not is_queue:
                raise TmsInvalidArgumentError(f"the dead-letter queue {target} is not a queue")
        return config

    def queue_config(self, topic: TopicId) -> QueueConfig | None:
        """The topic's queue settings; None if it is not a queue."""
        return QueueConfig.of(self.get_topic(topic).properties)

    def enqueue(self, request: EnqueueRequest) -> tuple[Enqueued, ...]:
        return self.submit(Enqueue(request))

    def receive(self, request: ReceiveRequest) -> ReceiveResult:
        return self.submit(Receive(request))

    def ack(self, request: AckRequest) -> tuple[AckOutcome, ...]:
        return self.submit(Ack(request))

    def nack(self, request: NackRequest) -> tuple[AckOutcome, ...]:
        return self.submit(Nack(request))

    def settle(self, request: SettleRequest) -> int:
        return self.submit(Settle(request))

    def queue_stats(self, topic: TopicId) -> QueueStats:
        """Messages per state, after the queue's housekeeping (expired leases and due
        messages counted where they now are)."""
        self.submit(Maintain(topic))
        prefix = self._queue_prefix(topic)
        counts = self._tables.queues.counters(prefix)
        pending, scheduled, ready, leased, acked, dead = counts
        oldest = self._tables.queues.first_ready_due(prefix)
        return QueueStats(pending, scheduled, ready, leased, acked, dead, oldest)

    def _queue_prefix(self, topic: TopicId) -> bytes:
        metadata = self.get_topic(topic)
        if QueueConfig.of(metadata.properties) is None:
            raise TmsInvalidArgumentError(f"{topic} is not a queue")
        return keys.topic_prefix(topic, metadata.generation)

    def _queues(self) -> list[TopicMetadata]:
        return [
            m
            for m in self._tables.metadata.scan_all()
            if m.exists and m.properties.get("kind") == QueueConfig.KIND
        ]

    def looks_after(self, topic: TopicId) -> bool:
        """Whether this instance does ``topic``'s housekeeping: no other live instance
        owns it (see the module docstring)."""
        return self.ownership is None or not self.ownership.held_elsewhere(topic)

    def _queues_here(self) -> list[TopicMetadata]:
        return [m for m in self._queues() if self.looks_after(m.topic)]

    def queues_stats(self) -> list[tuple[TopicId, QueueStats]]:
        """``queue_stats`` of every queue this instance looks after (for metrics: each
        queue's counts come from its owner)."""
        return [(m.topic, self.queue_stats(m.topic)) for m in self._queues_here()]

    def pending_queue_pointers(self) -> dict[TopicId, set[int]]:
        """Per queue, write pointers of transactions with enqueues or acks pending there
        (the oldest ones first, up to 10,000 entries a queue): for cleanup, which settles
        them and keeps the invalid list's prune bound below them."""
        found = {
            m.topic: self._tables.queues.pending_pointers(
                keys.topic_prefix(m.topic, m.generation), 10_000
            )
            for m in self._queues()
        }
        return {topic: pointers for topic, pointers in found.items() if pointers}

    def maintain_queues(self, *, purge: bool = True) -> int:
        """The housekeeping (``Maintain``) of every queue this instance looks after, and
        its dead letters moved; how many messages changed."""
        queues = self._queues_here()
        changed = sum(
            ticket.result()  # type: ignore[misc]
            for ticket in self.write([Maintain(m.topic, purge) for m in queues])
            if ticket.error is None
        )
        for m in queues:
            if QueueConfig.of(m.properties) is not None and m.properties.get("dead_letter_queue"):
                try:
                    changed += self.move_dead_letters(m.topic)
                except TmsError as exc:
                    log.warning("could not move dead letters of %s: %s", m.topic, exc)
        return changed

    def move_dead_letters(self, topic: TopicId) -> int:
        """Move the queue's MOVING messages to its dead-letter queue (``tms.queue_dead``,
        steps 2 and 3); how many left the queue. Safe at any time, twice at once too.
        ``TmsInvalidArgumentError`` when the dead-letter queue is not a queue (then they
        stay MOVING, counted dead, until it is)."""
        metadata = self.get_topic(topic)
        config = QueueConfig.of(metadata.properties)
        if config is None or config.dead_letter_queue is None:
            return 0
        target = TopicId(topic.namespace, config.dead_letter_queue)
        prefix = keys.topic_prefix(topic, metadata.generation)
        moved = 0
        while rows := self._tables.queues.moving(prefix, _MOVE_BATCH):
            if target == topic or self.queue_config(target) is None:
                raise TmsInvalidArgumentError(f"the dead-letter queue {target} is not a queue")
            # Copied (durably) before removed: a crash in between leaves a copy and a
            # MOVING original, and the next move finds the copy's origin row.
            self.submit(DeadLetterIn(target, prefix, tuple(r.message() for r in rows)))
            moved += self.submit(DeadLetterDone(topic, tuple(r.id for r in rows)))
            if len(rows) < _MOVE_BATCH:
                break
        return moved

    def _move_soon(self, topic: TopicId) -> None:
        """``move_dead_letters`` on the mover's thread (a writer's batch must not wait)."""

        def move() -> None:
            try:
                self.move_dead_letters(topic)
            except TmsError as exc:
                log.warning("could not move dead letters of %s yet: %s", topic, exc)

        with contextlib.suppress(RuntimeError):  # shut down: cleanup moves them later
            self._mover.submit(move)
