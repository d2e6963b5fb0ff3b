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
  first (a commit riding on a poll: checked first, then written while the read goes
  on from it; the read returns once the write is durable, and fails if it failed; a
  read that fails once the write is durable answers the commit, without messages, with
  ``SubscriptionPoll.read_error``). With ``commit_later`` (on a store that stages,
  ``StagingSubscriptionStore``) the read does not wait for its commit's write: the
  commit is checked and accepted, the read answers at once, and
  ``SubscriptionPoll.durable_version`` says which version of the record was durable
  then (a commit that gave a version above it may still be lost to a crash or a failed
  write; the next commit from that version then gets ``BadVersionError``). Every other
  operation on the subscription first waits for such a write, so it sees (and checks
  versions against) only what is durable. Or ``read`` reads
  with its transaction brought up to date with ``finished`` transactions
  (``read_after_finish``).
* Topic generations: deleting a topic deletes its subscriptions (``topic_deleted``); a
  record that names an older generation than its topic's (a delete interrupted by a
  crash) is reset to the start of the current generation when it is next read.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, cast

from tms.codec import keys
from tms.errors import (
    BadVersionError,
    SubscriptionNotFoundError,
    TmsInvalidArgumentError,
)
from tms.ids import MessageId
from tms.lag import COUNT_LIMIT, GAUGE_COUNT_LIMIT, lags
from tms.model import TopicId, TopicMetadata
from tms.operations import RollbackPosition, WritePosition
from tms.positions import Resolved, doomed_rows, fresh_view, resolve, superseded_by
from tms.store.subscriptions import SubscriptionStore
from tms.store.tables import TableBatch, Tables
from tms.subbounds import PositionBounds
from tms.subnowait import may_wait
from tms.subread import (
    DEFAULT_LIMIT,
    SubscriptionPoll,
    check_limit,
    read_after_finish,
    read_subscription,
)
from tms.subride import RidingCommits
from tms.subscription import (
    EARLIEST,
    Lag,
    Preferences,
    Start,
    Subscription,
    SubscriptionData,
    SubscriptionId,
    SubscriptionState,
    Versioned,
)
from txn.transaction import Transaction

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
        tables: Tables,
        store: SubscriptionStore,
        *,
        stamps: Callable[[], int] = _random_stamp,
    ) -> None:
        """``tables``: the service's (a part of it, as its writers are)."""
        self.svc = service
        self._tables = tables
        self.store = store
        self._bounds = PositionBounds(service, tables)
        self._stamps = stamps
        self._riding = RidingCommits(self)  # commits riding on reads (``read``)

    # -- records ------------------------------------------------------------------------

    def record(self, sub: SubscriptionId) -> tuple[TopicMetadata, Versioned]:
        """The topic and the subscription's record, reset first if it names an older
        generation (see the module docstring); once a commit answered before it was
        durable (``commit_later``) is written, or failed."""
        self._riding.settled(sub)
        return self.durable_record(sub)

    def durable_record(self, sub: SubscriptionId) -> tuple[TopicMetadata, Versioned]:
        """``record`` without waiting for a commit answered before its write."""
        metadata = self.svc.get_topic(sub.topic)
        while True:
            record = self.store.read(sub)
            if record is None:
                raise SubscriptionNotFoundError(sub)
            if record.data.state.generation == metadata.generation:
                return metadata, record
            may_wait("the record's reset to its topic's generation")
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
        rows = self._tables.positions.rows(self._prefix(metadata), sub.name)
        view = transaction
        if view is None:
            mine = [r.write_pointer for r in rows if r.stamp == state.stamp]
            view = self._view(mine) if mine else None
        return resolve(state, rows, view)

    def _view(self, pointers: list[int]) -> Transaction | None:
        may_wait("a question to the transaction manager")
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

    # -- operations -----------------------------------------------------------------------

    def create(
        self,
        sub: SubscriptionId,
        preferences: Preferences,
        transaction: Transaction | None = None,
    ) -> Subscription:
        metadata = self.svc.get_topic(sub.topic)
        position = self._bounds.target(metadata, preferences, preferences.start, transaction)
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
        return lags(self._tables, metadata, [position], self.svc.now_ms())[0]

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
        counted = lags(self._tables, metadata, [s.position for s in found], self.svc.now_ms())
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
        batch = TableBatch()
        rows = self._tables.positions.rows(prefix, name)
        batch.delete_positions(prefix, name, [row.write_pointer for row in rows])
        self._tables.write(batch, sync=False)

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
        position = self._bounds.target(metadata, record.data.preferences, start, transaction)
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
        data = self.checked_move(
            sub, metadata, record, position, version=version, transaction=transaction
        )
        return Versioned(data, self.store.write(sub, data, record.version))

    def checked_move(
        self,
        sub: SubscriptionId,
        metadata: TopicMetadata,
        record: Versioned,
        position: MessageId,
        *,
        version: int,
        transaction: Transaction | None,
        within_topic: bool = False,
    ) -> SubscriptionData:
        """The record with its position moved to ``position``, once the move is allowed
        (``within_topic``: the caller saw an entry at or after ``position``, so it is not
        past the topic's last entry: ``PositionBounds.check_move``)."""
        self._check_version(sub, record, version)
        current = self.resolved(sub, metadata, record).position
        self._bounds.check_move(
            metadata,
            record.data.preferences,
            current,
            position,
            transaction,
            within_topic=within_topic,
        )
        return SubscriptionData(record.data.preferences, self._state(position, metadata))

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
    ) -> WritePosition:
        """Check a transactional commit of ``position`` and make its write operation
        (to submit through ``MessagingService.submit``, whose guard checks the transaction
        is in progress)."""
        metadata, record = self.record(sub)
        self._check_version(sub, record, version)
        state = record.data.state
        rows = self._tables.positions.rows(self._prefix(metadata), sub.name)
        current = resolve(state, rows, transaction).position
        self._bounds.check_move(metadata, record.data.preferences, current, position, transaction)
        return WritePosition(
            sub.topic,
            sub.name,
            transaction.write_pointer,
            state.stamp,
            position,
            self.svc.now_ms(),
            superseded_by(state, rows, transaction),
        )

    def commit_in_transaction(
        self,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        transaction: Transaction,
    ) -> None:
        """``prepare_position`` and write it: ``position`` becomes the subscription's
        when ``transaction`` commits, and never if it aborts or is invalidated."""
        self.svc.submit(self.prepare_position(sub, position, version, transaction))

    def rollback_in_transaction(self, sub: SubscriptionId, write_pointers: Sequence[int]) -> int:
        """Remove the positions ``sub`` got under ``write_pointers`` (each in progress or
        invalid, never committed: the guard checks), in one write; how many rows were
        removed (0 on a repeat)."""
        tickets = self.svc.write(
            [RollbackPosition(sub.topic, sub.name, wp) for wp in write_pointers]
        )
        return sum(cast(int, ticket.result()) for ticket in tickets)

    def read(
        self,
        sub: SubscriptionId,
        *,
        start_from: MessageId | None = None,
        limit: int = DEFAULT_LIMIT,
        transaction: Transaction | None = None,
        commit_version: int | None = None,
        commit_later: bool = False,
        finished: Collection[int] = (),
    ) -> SubscriptionPoll:
        """Read from the position (``tms.subread``); with ``commit_version``, ``commit``
        ``start_from`` with that version first (one step: the read goes on from the
        record it wrote; with ``commit_later``, not waiting for the write: see the
        module docstring; ``tms.subride``); with ``finished`` (and a transaction),
        ``read_after_finish``."""
        if finished and transaction is not None:
            if commit_version is not None:
                raise TmsInvalidArgumentError("a read after a finish commits nothing")
            return read_after_finish(
                self,
                sub,
                start_from=start_from,
                limit=limit,
                transaction=transaction,
                finished=finished,
            )
        if commit_version is None:
            return read_subscription(
                self, sub, start_from=start_from, limit=limit, transaction=transaction
            )
        if start_from is None:
            raise TmsInvalidArgumentError("a commit before a read commits its start: give one")
        check_limit(limit)  # bad input changes nothing: checked before the commit
        return self._riding.read(
            sub, start_from, limit, transaction, commit_version, later=commit_later
        )

    def local_reads(self) -> bool:
        """Whether a read of a subscription now is answered by this process alone: the
        messages' store and the records' store both say so (``local_reads``; a store
        that does not say, as a coordination service's, is not)."""
        return self.svc.local_reads() and bool(getattr(self.store, "local_reads", False))

    def close(self) -> None:
        """Finish the writes under way (``MessagingService.close``)."""
        self._riding.close()

    # -- topics and metrics ---------------------------------------------------------------

    def topic_deleted(self, topic: TopicId) -> None:
        """Delete every subscription of a deleted topic (their positions went with its
        generation)."""
        for name, listed in self.store.list(topic):
            sub = SubscriptionId(topic, name)
            self._riding.settled(sub)  # a commit answered before its write: written first
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
        """The lag of every subscription of every topic (the Prometheus gauge: at most
        ``GAUGE_COUNT_LIMIT`` rows scanned a topic, estimated beyond)."""
        found: builtins.list[tuple[SubscriptionId, Lag]] = []
        for metadata in self.svc.all_topics():
            if metadata.exists:
                found.extend(self.topic_lags(metadata, count_limit=GAUGE_COUNT_LIMIT))
        return found

    def topic_lags(
        self, metadata: TopicMetadata, *, count_limit: int = COUNT_LIMIT
    ) -> builtins.list[tuple[SubscriptionId, Lag]]:
        """The lag of each subscription of one topic, by name: one read of the records,
        one of the transactional positions, one question to the transaction manager,
        one scan of at most ``count_limit`` rows (``tms.lag``)."""
        records = self.store.list(metadata.topic)
        if not records:
            return []
        rows = self._tables.positions.all_rows(self._prefix(metadata))
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
        counted = lags(
            self._tables, metadata, positions, self.svc.now_ms(), count_limit=count_limit
        )
        return list(zip(subs, counted, strict=True))

    def clean_positions(self, metadata: TopicMetadata, invalid: frozenset[int]) -> int:
        """Delete the topic's position rows of ``invalid`` transactions (counted, durably:
        the invalid list may be pruned after this) and those nobody reads (cleanup)."""
        prefix = self._prefix(metadata)
        rows = self._tables.positions.all_rows(prefix)  # before listing: see doomed_rows
        if not rows:
            return 0
        stamps = {name: r.data.state.stamp for name, r in self.store.list(metadata.topic)}
        batch = TableBatch()
        count = 0
        for name, doomed, dead in doomed_rows(rows, stamps, invalid):
            batch.delete_positions(prefix, name, doomed)
            count += dead
        self._tables.write(batch)
        return count
