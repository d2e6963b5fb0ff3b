"""The queue methods of ``MessagingService`` (``tms.queues``), a base class of it: each
write is ``submit`` of its operation (``tms.operations``), applied by the queue's topic
writer; the rest reads the queue tables (``tms.store.queues``). ``move_dead_letters``
drives the moves to dead-letter queues (``tms.queue_dead``): after each batch that
made messages MOVING (on one thread of its own), and from ``maintain_queues``.

With several instances the steps of a move are written by different owners: the
dead-letter queue's owner copies (step 2), the source queue's owner removes (step 3).
Each instance does the steps it may write (claiming a queue nobody owns) and leaves the
others to their owners, whom it tells through the change feed (an announcement of a
queue, which nobody but its owner announces otherwise: its owner takes it as "dead
letters are waiting for you", and runs ``move_dead_letters`` and ``take_dead_letters``
for it). A missed announcement is made up for by the owners' housekeeping
(``maintain_queues`` moves the dead letters of every queue, owned here or not, as far as
this instance may), so a move is never stranded, only late.

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

from tms.changes import ChangeFeed, TopicChanges
from tms.codec import keys
from tms.codec.queue import QueueRow
from tms.errors import NotOwnerError, TmsError, TmsInvalidArgumentError, TopicNotFoundError
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
from tms.queue_leases import stored_leases
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
    _feed: ChangeFeed | None
    _changes: TopicChanges
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
        _records, leases = stored_leases(self._tables.queues, prefix)
        oldest = self._tables.queues.first_ready_due(prefix, leases)
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
        the dead letters on their way out of any queue moved as far as this instance may
        (``move_dead_letters``); how many messages changed."""
        queues = self._queues_here()
        changed = sum(
            ticket.result()  # type: ignore[misc]
            for ticket in self.write([Maintain(m.topic, purge) for m in queues])
            if ticket.error is None
        )
        for m in self._queues():
            if self._tables.queues.moving(keys.topic_prefix(m.topic, m.generation), 1):
                try:
                    changed += self.move_dead_letters(m.topic)
                except TmsError as exc:
                    log.warning("could not move dead letters of %s: %s", m.topic, exc)
        return changed

    def move_dead_letters(self, topic: TopicId, *, into: TopicId | None = None) -> int:
        """Move the queue's MOVING messages (those going to ``into`` only, if given) on to
        their dead-letter queue (``tms.queue_dead``): step 2 where this instance may write
        the dead-letter queue, step 3 where it may write this one; a step whose queue
        another instance owns is left to it, and it is told (``ChangeFeed.announce``:
        its owner takes an announcement of a queue it owns as that). Messages whose
        dead-letter queue is gone (deleted, or no longer a queue) become DEAD here. How
        many messages left the queue or became DEAD. Safe at any time, twice at once too,
        on any instance."""
        metadata = self.get_topic(topic)
        config = QueueConfig.of(metadata.properties)
        if config is None:
            return 0
        prefix = keys.topic_prefix(topic, metadata.generation)
        changed = 0
        after = b""
        while page := self._tables.queues.moving(prefix, _MOVE_BATCH, after):
            after = page[-1][0]
            groups: dict[str | None, list[QueueRow]] = {}
            for _key, row, dest in page:
                # Rows made MOVING before destinations were kept go where it says now.
                groups.setdefault(dest or config.dead_letter_queue, []).append(row)
            for dest, rows in groups.items():
                target = _queue_named(topic.namespace, dest)
                if into is None or target == into:
                    changed += self._move(topic, prefix, target, rows)
            if len(page) < _MOVE_BATCH:
                break
        return changed

    def take_dead_letters(self, target: TopicId) -> int:
        """``move_dead_letters(..., into=target)`` of every queue of ``target``'s
        namespace with messages on their way to it (the dead-letter queue's owner, told
        or in its housekeeping, copies them)."""
        return sum(
            self.move_dead_letters(m.topic, into=target)
            for m in self._queues()
            if m.topic.namespace == target.namespace
            and m.topic != target
            and self._tables.queues.moving(keys.topic_prefix(m.topic, m.generation), 1)
        )

    def _move(
        self, source: TopicId, prefix: bytes, target: TopicId | None, rows: list[QueueRow]
    ) -> int:
        """Steps 2 and 3 for ``rows`` of ``source`` going to ``target`` (see
        ``move_dead_letters``)."""
        target_prefix = self._dead_letter_prefix(source, target)
        ids = tuple(r.id for r in rows)
        if target is None or target_prefix is None:
            return self._where_owned(DeadLetterDone(source, None, ids)) or 0
        q = self._tables.queues
        uncopied = [r for r in rows if q.id_of_origin(target_prefix, prefix + r.id) is None]
        # Copied (durably) before removed: a crash in between leaves a copy and a MOVING
        # original, and the next move finds the copy's origin row.
        if (
            uncopied
            and self._where_owned(
                DeadLetterIn(target, prefix, tuple(r.message() for r in uncopied))
            )
            is None
        ):
            left = {r.id for r in uncopied}
            ids = tuple(i for i in ids if i not in left)
        if not ids:
            return 0
        return self._where_owned(DeadLetterDone(source, target_prefix, ids)) or 0

    def _dead_letter_prefix(self, source: TopicId, target: TopicId | None) -> bytes | None:
        """The prefix of ``target`` if it is a queue other than ``source`` (else None)."""
        if target is None or target == source:
            return None
        try:
            metadata = self.get_topic(target)
        except TopicNotFoundError:
            return None
        if QueueConfig.of(metadata.properties) is None:
            return None
        return keys.topic_prefix(target, metadata.generation)

    def _where_owned(self, op: DeadLetterIn | DeadLetterDone) -> int | None:
        """``op``'s result, or None when another instance owns its queue (then told)."""
        try:
            return self.submit(op)
        except NotOwnerError:
            if self._feed is not None:
                self._feed.announce(op.topic)
            return None

    def _announced(self, topic: TopicId) -> None:
        """Another instance announced ``topic`` (``ChangeFeed``): its waiters wake; and
        if this instance owns it and it is a queue, dead letters may be waiting for a
        step only this instance may write (nobody else announces a topic its owner
        writes, but a dead-letter move that needs the owner)."""
        self._changes.bump(topic)
        if self.ownership is not None and self.ownership.claimed(topic):
            self._move_soon(topic, into=True)

    def _move_soon(self, topic: TopicId, *, into: bool = False) -> None:
        """``move_dead_letters`` (and with ``into``, ``take_dead_letters``) on the
        mover's thread (a writer's batch, or the feed's thread, must not wait)."""

        def move() -> None:
            try:
                self.move_dead_letters(topic)
                if into:
                    self.take_dead_letters(topic)
            except TmsError as exc:
                log.warning("could not move dead letters of %s yet: %s", topic, exc)

        with contextlib.suppress(RuntimeError):  # shut down: cleanup moves them later
            self._mover.submit(move)


def _queue_named(namespace: str, name: str | None) -> TopicId | None:
    """The queue ``name`` of ``namespace`` (None: no name, or not a valid one)."""
    if name is None:
        return None
    try:
        return TopicId(namespace, name)
    except TmsInvalidArgumentError:
        return None
