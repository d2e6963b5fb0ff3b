"""``Subscriptions``: the service's subscriptions — their records, positions, reads and
lag (``MessagingService.subscriptions``).

Contract (thread-safe; errors from ``tms.errors``):

* ``create`` (``SubscriptionExistsError`` if it exists), ``get``, ``list`` (with lag),
  ``update_preferences``, ``delete``: the record lives in the ``SubscriptionStore``
  (``tms.store.subscriptions``); every update carries the version it read, and a stale
  one gets ``BadVersionError`` and changes nothing.
* The **start** of a new subscription, and the target of a ``seek``, is resolved to a
  position when it is set: earliest (before every entry), latest (after the last
  entry), a time (the first entry published at or after it, or after the last entry),
  a message id (at most after the last entry). For a transactional subscription it is
  never past the first entry of a transaction in progress (the request's transaction,
  or a fresh view of the manager's; without a transaction manager, the end of the
  topic).
* ``commit`` moves the stored position; it may not move backwards (only ``seek`` may:
  ``PositionOutOfRangeError``) nor past what the subscription could have read: after the
  last entry, and for a transactional subscription past the first entry its reader's
  transaction (required) could not see.
* ``prepare_position`` / ``commit_in_transaction`` write the position as part of a
  transaction (``tms.positions``): the same checks, against the position that
  transaction sees; ``rollback_in_transaction`` removes it.
* ``read`` reads from the position (``tms.subread``), optionally committing its start
  first (a commit riding on a poll).
* Topic generations: deleting a topic deletes its subscriptions (``topic_deleted``); a
  record that names an older generation than its topic's (a delete interrupted by a
  crash) is reset to the start of the current generation when it is next read.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tms.codec import keys
from tms.errors import (
    BadVersionError,
    PositionOutOfRangeError,
    SubscriptionNotFoundError,
    TmsError,
    TmsInvalidArgumentError,
)
from tms.fetcher import FetchRequest, scan_bounds
from tms.ids import MessageId
from tms.lag import lags
from tms.model import TopicId, TopicMetadata
from tms.positions import (
    PositionRollback,
    PositionWrite,
    Resolved,
    fresh_view,
    resolve,
    superseded_by,
)
from tms.store.subscriptions import SubscriptionStore
from tms.subread import DEFAULT_LIMIT, SubscriptionPoll, read_subscription
from tms.subscription import (
    EARLIEST,
    Lag,
    Preferences,
    Start,
    StartKind,
    Subscription,
    SubscriptionData,
    SubscriptionId,
    SubscriptionState,
    Versioned,
    after_entry,
)
from txn.transaction import MAX_TX_PER_MS, Transaction

if TYPE_CHECKING:
    from tms.service import MessagingService

__all__ = ["Subscriptions"]

log = logging.getLogger(__name__)


def _random_stamp() -> int:
    return secrets.randbits(63)


class Subscriptions:
    """See the module docstring."""

    def __init__(
        self,
        service: MessagingService,
        store: SubscriptionStore,
        *,
        stamps: Callable[[], int] = _random_stamp,
    ) -> None:
        self.svc = service
        self.store = store
        self._stamps = stamps

    # -- records ------------------------------------------------------------------------

    def record(self, sub: SubscriptionId) -> tuple[TopicMetadata, Versioned]:
        """The topic and the subscription's record, reset first if it names an older
        generation (see the module docstring)."""
        metadata = self.svc.get_topic(sub.topic)
        while True:
            record = self.store.read(sub)
            if record is None:
                raise SubscriptionNotFoundError(sub)
            if record.data.state.generation == metadata.generation:
                return metadata, record
            state = self._state(EARLIEST, metadata)
            data = SubscriptionData(record.data.preferences, state)
            try:
                version = self.store.write(sub, data, record.version)
            except BadVersionError:
                continue  # changed meanwhile: look again
            log.info("subscription %s reset to generation %d", sub, metadata.generation)
            return metadata, Versioned(data, version)

    def _state(self, position: MessageId, metadata: TopicMetadata) -> SubscriptionState:
        return SubscriptionState(position, metadata.generation, self._stamps(), self.svc.now_ms())

    @staticmethod
    def _check_version(sub: SubscriptionId, record: Versioned, version: int) -> None:
        if record.version != version:
            raise BadVersionError(
                f"subscription {sub} is at version {record.version}, not {version}: it "
                "changed since it was read",
                expected=version,
                actual=record.version,
            )

    def _prefix(self, metadata: TopicMetadata) -> bytes:
        return keys.topic_prefix(metadata.topic, metadata.generation)

    def resolved(
        self,
        sub: SubscriptionId,
        metadata: TopicMetadata,
        record: Versioned,
        transaction: Transaction | None = None,
    ) -> Resolved:
        """Where ``sub``'s next read starts for ``transaction`` (None: as committed
        now, by a fresh view of the transaction manager's state)."""
        state = record.data.state
        rows = self.svc.tables.positions.rows(self._prefix(metadata), sub.name)
        view = transaction
        if view is None:
            mine = [r.write_pointer for r in rows if r.stamp == state.stamp]
            view = self._view(mine) if mine else None
        return resolve(state, rows, view)

    def _view(self, pointers: list[int]) -> Transaction | None:
        state = self.svc.guard.state(pointers)
        return fresh_view(state) if state is not None else None

    def _view_of(
        self, sub: SubscriptionId, record: Versioned, resolved: Resolved, lag: Lag | None
    ) -> Subscription:
        return Subscription(
            sub,
            record.data,
            record.version,
            resolved.position,
            resolved.write_pointer,
            max(record.data.state.updated_ms, resolved.updated_ms),
            lag,
        )

    # -- bounds -------------------------------------------------------------------------

    def _tail(self, metadata: TopicMetadata) -> MessageId:
        """The position after the topic's last entry."""
        last = self.svc.tables.messages.last_position(self._prefix(metadata))
        return after_entry(*last) if last is not None else EARLIEST

    def first_hold(
        self,
        metadata: TopicMetadata,
        tx: Transaction,
        start: MessageId,
        stop: MessageId | None = None,
    ) -> MessageId | None:
        """The position of the first entry from ``start`` (before ``stop``) that ``tx``
        cannot see yet — where its read stops — or None."""
        request = FetchRequest(start_id=MessageId(start.publish_ms, start.seq), transaction=tx)
        held = scan_bounds(self.svc.tables, metadata, request, self.svc.now_ms()).held
        if held is None:
            return None
        position = MessageId(*held)
        return position if stop is None or position < stop else None

    def _hold_since(
        self, metadata: TopicMetadata, tx: Transaction, anchor_ms: int
    ) -> MessageId | None:
        """The first entry ``tx`` cannot see, looking only where one can be: from the
        start of the oldest transaction it sees in progress (or ``anchor_ms``), less the
        clock skew allowed between the manager and this service."""
        oldest = min([wp // MAX_TX_PER_MS for wp in tx.in_progress] + [anchor_ms])
        since = max(0, oldest - self.svc.config.tx_clock_skew_s * 1000)
        return self.first_hold(metadata, tx, MessageId(since, 0))

    def _target(
        self,
        metadata: TopicMetadata,
        preferences: Preferences,
        start: Start,
        transaction: Transaction | None,
    ) -> MessageId:
        """Where ``start`` puts a subscription now (see the module docstring)."""
        if start.kind is StartKind.EARLIEST:
            return EARLIEST
        tail = self._tail(metadata)
        if start.kind is StartKind.LATEST:
            target = tail
        elif start.kind is StartKind.TIME:
            assert start.time_ms is not None
            target = min(MessageId(start.time_ms, 0), tail)
        else:
            assert start.message_id is not None
            target = start.message_id
            if target > tail:
                raise PositionOutOfRangeError(
                    f"message id {target.hex} is after the last entry of {metadata.topic}"
                )
        if preferences.transactional:
            if transaction is not None:
                started_ms = transaction.transaction_id // MAX_TX_PER_MS
                held = self._hold_since(metadata, transaction, started_ms)
            else:
                state = self.svc.guard.state(())
                held = (
                    self._hold_since(metadata, fresh_view(state), self.svc.now_ms())
                    if state is not None
                    else None
                )
            if held is not None and held < target:
                target = held
        return target

    def _check_move(
        self,
        metadata: TopicMetadata,
        preferences: Preferences,
        current: MessageId,
        position: MessageId,
        transaction: Transaction | None,
    ) -> None:
        """Refuse a commit of ``position`` over ``current`` (see the module docstring)."""
        if position < current:
            raise PositionOutOfRangeError(
                f"position {position.hex} is before the subscription's {current.hex}: only "
                "a seek moves a position backwards"
            )
        if position == current:
            return
        if position > self._tail(metadata):
            raise PositionOutOfRangeError(
                f"position {position.hex} is after the last entry of {metadata.topic}"
            )
        if preferences.transactional:
            if transaction is None:
                raise TmsInvalidArgumentError(
                    "a transactional subscription's commit carries the transaction it read with"
                )
            held = self.first_hold(metadata, transaction, current, position)
            if held is not None:
                raise PositionOutOfRangeError(
                    f"position {position.hex} is past {held.hex}, an entry of a transaction "
                    "the reader could not see"
                )

    # -- operations -----------------------------------------------------------------------

    def create(
        self,
        sub: SubscriptionId,
        preferences: Preferences,
        transaction: Transaction | None = None,
    ) -> Subscription:
        metadata = self.svc.get_topic(sub.topic)
        position = self._target(metadata, preferences, preferences.start, transaction)
        data = SubscriptionData(preferences, self._state(position, metadata))
        version = self.store.create(sub, data)
        record = Versioned(data, version)
        resolved = Resolved(position, None, data.state.updated_ms)
        return self._view_of(sub, record, resolved, self._lag(metadata, position))

    def get(self, sub: SubscriptionId, *, lag: bool = True) -> Subscription:
        metadata, record = self.record(sub)
        resolved = self.resolved(sub, metadata, record)
        return self._view_of(
            sub, record, resolved, self._lag(metadata, resolved.position) if lag else None
        )

    def _lag(self, metadata: TopicMetadata, position: MessageId) -> Lag:
        return lags(self.svc.tables, metadata, [position], self.svc.now_ms())[0]

    def list(self, topic: TopicId, *, lag: bool = True) -> list[Subscription]:
        """Every subscription of ``topic``, by name."""
        metadata = self.svc.get_topic(topic)
        found = []
        for name, _record in self.store.list(topic):
            sub = SubscriptionId(topic, name)
            try:
                found.append(self.get(sub, lag=False))
            except SubscriptionNotFoundError:
                continue  # deleted meanwhile
        if not lag:
            return found
        counted = lags(self.svc.tables, metadata, [s.position for s in found], self.svc.now_ms())
        return [
            Subscription(s.id, s.data, s.version, s.position, s.committed_by, s.updated_ms, n)
            for s, n in zip(found, counted, strict=True)
        ]

    def update_preferences(
        self, sub: SubscriptionId, preferences: Preferences, version: int
    ) -> Subscription:
        """Replace the preferences (the position stays; ``start`` is only recorded)."""
        metadata, record = self.record(sub)
        self._check_version(sub, record, version)
        data = SubscriptionData(preferences, record.data.state)
        new = Versioned(data, self.store.write(sub, data, version))
        return self._view_of(sub, new, self.resolved(sub, metadata, new), None)

    def delete(self, sub: SubscriptionId, version: int) -> None:
        metadata, record = self.record(sub)
        self._check_version(sub, record, version)
        self.store.delete(sub, version)
        self._drop_rows(metadata, sub.name)

    def _drop_rows(self, metadata: TopicMetadata, name: str) -> None:
        """Remove a deleted subscription's transactional positions (a recreated one has
        another stamp, so rows left behind by a crash never count; cleanup removes them)."""
        prefix = self._prefix(metadata)
        table = self.svc.tables.positions
        doomed = [
            PositionRollback(name, row.write_pointer).write_ops(table, prefix)
            for row in table.rows(prefix, name)
        ]
        ops = [op for group in doomed for op in group]
        if ops:
            self.svc.tables.kv.write(ops, sync=False)

    def seek(
        self,
        sub: SubscriptionId,
        start: Start,
        version: int,
        transaction: Transaction | None = None,
    ) -> Subscription:
        """Move the position to ``start`` (backwards too); supersedes transactional
        positions written before it."""
        metadata, record = self.record(sub)
        self._check_version(sub, record, version)
        position = self._target(metadata, record.data.preferences, start, transaction)
        return self._store_position(sub, metadata, record, position)

    def commit(
        self,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        transaction: Transaction | None = None,
    ) -> Subscription:
        """Move the stored position forward to ``position`` (not transactionally)."""
        metadata, record = self.record(sub)
        new = self._commit(
            sub, metadata, record, position, version=version, transaction=transaction
        )
        return self._view_of(sub, new, Resolved(position, None, new.data.state.updated_ms), None)

    def _commit(
        self,
        sub: SubscriptionId,
        metadata: TopicMetadata,
        record: Versioned,
        position: MessageId,
        *,
        version: int,
        transaction: Transaction | None,
    ) -> Versioned:
        self._check_version(sub, record, version)
        current = self.resolved(sub, metadata, record).position
        self._check_move(metadata, record.data.preferences, current, position, transaction)
        return self._write_position(sub, metadata, record, position)

    def _store_position(
        self, sub: SubscriptionId, metadata: TopicMetadata, record: Versioned, position: MessageId
    ) -> Subscription:
        new = self._write_position(sub, metadata, record, position)
        return self._view_of(sub, new, Resolved(position, None, new.data.state.updated_ms), None)

    def _write_position(
        self, sub: SubscriptionId, metadata: TopicMetadata, record: Versioned, position: MessageId
    ) -> Versioned:
        data = SubscriptionData(record.data.preferences, self._state(position, metadata))
        return Versioned(data, self.store.write(sub, data, record.version))

    def prepare_position(
        self,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        transaction: Transaction,
    ) -> tuple[TopicMetadata, PositionWrite]:
        """Check a transactional commit of ``position`` and make its write operation
        (to submit through ``MessagingService.write``, whose guard checks the transaction
        is in progress)."""
        metadata, record = self.record(sub)
        self._check_version(sub, record, version)
        state = record.data.state
        rows = self.svc.tables.positions.rows(self._prefix(metadata), sub.name)
        current = resolve(state, rows, transaction).position
        self._check_move(metadata, record.data.preferences, current, position, transaction)
        write = PositionWrite(
            sub.name,
            transaction.write_pointer,
            state.stamp,
            position,
            self.svc.now_ms(),
            superseded_by(state, rows, transaction),
        )
        return metadata, write

    def commit_in_transaction(
        self,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        transaction: Transaction,
    ) -> None:
        """``prepare_position`` and write it: ``position`` becomes the subscription's
        when ``transaction`` commits, and never if it aborts or is invalidated."""
        _metadata, write = self.prepare_position(sub, position, version, transaction)
        self.svc.write_one(sub.topic, "position", write)

    def rollback_in_transaction(self, sub: SubscriptionId, write_pointers: Sequence[int]) -> int:
        """Remove the positions ``sub`` got under ``write_pointers`` (each in progress or
        invalid, never committed: the guard checks), in one write; how many rows were
        removed (0 on a repeat)."""
        operations = [("unposition", PositionRollback(sub.name, wp)) for wp in write_pointers]
        removed = 0
        for outcome in self.svc.write(sub.topic, operations):
            if isinstance(outcome, TmsError):
                raise outcome
            removed += int(outcome)
        return removed

    def read(
        self,
        sub: SubscriptionId,
        *,
        start_from: MessageId | None = None,
        limit: int = DEFAULT_LIMIT,
        transaction: Transaction | None = None,
        commit_version: int | None = None,
    ) -> SubscriptionPoll:
        """Read from the position (``tms.subread``); with ``commit_version``, ``commit``
        ``start_from`` with that version first (one step: the read goes on from the
        record it wrote)."""
        current = None
        if commit_version is not None:
            if start_from is None:
                raise TmsInvalidArgumentError("a commit before a read commits its start: give one")
            metadata, record = self.record(sub)
            new = self._commit(
                sub, metadata, record, start_from, version=commit_version, transaction=transaction
            )
            current = metadata, new
        return read_subscription(
            self, sub, start_from=start_from, limit=limit, transaction=transaction, current=current
        )

    # -- topics and metrics ---------------------------------------------------------------

    def topic_deleted(self, topic: TopicId) -> None:
        """Delete every subscription of a deleted topic (their positions went with its
        generation)."""
        for name, listed in self.store.list(topic):
            sub = SubscriptionId(topic, name)
            record: Versioned | None = listed
            while record is not None:
                try:
                    self.store.delete(sub, record.version)
                    break
                except BadVersionError:
                    record = self.store.read(sub)  # changed meanwhile: delete that
                except SubscriptionNotFoundError:
                    break

    def all_lags(self) -> builtins.list[tuple[SubscriptionId, Lag]]:
        """The lag of every subscription of every topic (the Prometheus gauge)."""
        found: builtins.list[tuple[SubscriptionId, Lag]] = []
        for metadata in self.svc.tables.metadata.scan_all():
            if metadata.exists:
                found.extend(self.topic_lags(metadata))
        return found

    def topic_lags(self, metadata: TopicMetadata) -> builtins.list[tuple[SubscriptionId, Lag]]:
        """The lag of each subscription of one topic, by name: one read of the records,
        one of the transactional positions, one question to the transaction manager."""
        records = self.store.list(metadata.topic)
        if not records:
            return []
        rows = self.svc.tables.positions.all_rows(self._prefix(metadata))
        pointers = [r.write_pointer for name, _ in records for r in rows.get(name, ())]
        view = self._view(pointers) if pointers else None
        subs, positions = [], []
        for name, record in records:
            state = record.data.state
            stale = state.generation != metadata.generation
            subs.append(SubscriptionId(metadata.topic, name))
            positions.append(
                EARLIEST if stale else resolve(state, rows.get(name, ()), view).position
            )
        counted = lags(self.svc.tables, metadata, positions, self.svc.now_ms())
        return list(zip(subs, counted, strict=True))
