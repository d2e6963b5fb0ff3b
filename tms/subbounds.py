"""Where a subscription's position may be (``Subscriptions``): the start a preference
or a seek resolves to, and whether a commit may move a position (see
``tms.subscriptions``' docstring) — never backwards (only a seek may), never past the
last entry, and for a transactional subscription never past the first entry its reader
could not see (nor, for a start or seek, past the first entry of a transaction in
progress).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tms.codec import keys
from tms.errors import PositionOutOfRangeError, TmsInvalidArgumentError
from tms.fetcher import FetchRequest, scan_bounds
from tms.ids import MessageId
from tms.model import TopicMetadata
from tms.positions import fresh_view
from tms.store.tables import Tables
from tms.subscription import EARLIEST, Preferences, Start, StartKind, after_entry
from txn.transaction import MAX_TX_PER_MS, Transaction

if TYPE_CHECKING:
    from tms.service import MessagingService

__all__ = ["PositionBounds"]


class PositionBounds:
    """See the module docstring; reads the service's tables, asks its guard."""

    def __init__(self, service: MessagingService, tables: Tables) -> None:
        self.svc = service
        self._tables = tables

    def tail(self, metadata: TopicMetadata) -> MessageId:
        """The position after the topic's last entry."""
        last = self._tables.messages.last_position(
            keys.topic_prefix(metadata.topic, metadata.generation)
        )
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
        # Entries at ``stop`` and after it are not scanned; the one at stop's (publish_ms,
        # seq) is, when stop lies inside it (a position within a commit marker's payloads).
        bound = None
        if stop is not None:
            end = after_entry(stop.publish_ms, stop.seq) if stop.is_payload_message else stop
            bound = (end.publish_ms, end.seq)
        held = scan_bounds(self._tables, metadata, request, self.svc.now_ms(), stop=bound).held
        if held is None:
            return None
        position = MessageId(*held)
        return position if stop is None or position < stop else None

    def hold_since(
        self, metadata: TopicMetadata, tx: Transaction, anchor_ms: int
    ) -> MessageId | None:
        """The first entry ``tx`` cannot see, looking only where one can be: from the
        start of the oldest transaction it sees in progress (or ``anchor_ms``), less the
        clock skew allowed between the manager and this service."""
        oldest = min([wp // MAX_TX_PER_MS for wp in tx.in_progress] + [anchor_ms])
        since = max(0, oldest - self.svc.config.tx_clock_skew_s * 1000)
        return self.first_hold(metadata, tx, MessageId(since, 0))

    def target(
        self,
        metadata: TopicMetadata,
        preferences: Preferences,
        start: Start,
        transaction: Transaction | None,
    ) -> MessageId:
        """Where ``start`` puts a subscription now (see the module docstring)."""
        if start.kind is StartKind.EARLIEST:
            return EARLIEST
        tail = self.tail(metadata)
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
                held = self.hold_since(metadata, transaction, started_ms)
            else:
                state = self.svc.guard.state(())
                held = (
                    self.hold_since(metadata, fresh_view(state), self.svc.now_ms())
                    if state is not None
                    else None
                )
            if held is not None and held < target:
                target = held
        return target

    def check_move(
        self,
        metadata: TopicMetadata,
        preferences: Preferences,
        current: MessageId,
        position: MessageId,
        transaction: Transaction | None,
        *,
        within_topic: bool = False,
    ) -> None:
        """Refuse a commit of ``position`` over ``current`` (see the module docstring);
        ``within_topic``: the caller saw an entry at or after ``position`` (it is not past
        the last entry: the topic's end is not read)."""
        if position < current:
            raise PositionOutOfRangeError(
                f"position {position.hex} is before the subscription's {current.hex}: only "
                "a seek moves a position backwards"
            )
        if position == current:
            return
        if not within_topic and position > self.tail(metadata):
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
