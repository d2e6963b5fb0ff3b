"""Reading a topic from a subscription's position (``Subscriptions.read``).

A read starts at ``start_from`` when given (a consumer that has not committed its last
batches yet reads on from where it is), else at the subscription's position as the
reader's transaction sees it (``tms.positions``); it reads with the fetch rules of
``tms.fetcher`` — transactionally when the subscription is transactional, with the
transaction the request carries (required then) — and keeps the messages its payload
filter accepts, at most ``limit`` of them, passing over at most ``max_scan`` messages in
all. Nothing is changed: a read moves no position.

``SubscriptionPoll.position`` is where the next read starts: after the last message
returned when the read stopped at ``limit``; otherwise after everything it passed over
(rejected, rolled-back, invalid and expired entries included), or at the entry of a
transaction the reader cannot see (``held``, with its write pointer). So a position
taken from a read is never past what its reader could read.

``read_after_finish`` reads for a reader whose transaction ``tx`` is older than what
has finished since (a poll that was held behind a transaction, woken when it finished):
with a view (``FinishedView``) that is ``tx``, plus what the transaction manager says
now (its durable answer, ``tms.guard``) of the pointers asked about — ``tx``'s
in-progress ones and ``finished`` (those reported finished): each committed one becomes
visible, each invalid one excluded, the others stay as ``tx`` sees them. A pointer nobody
asked about stays unseen (it may be invalid: the manager's state names only the invalid
pointers it is asked about), so a read held at one that has finished asks again with it
too, at most ``ASK_ROUNDS`` times. The position of such a read is then past entries ``tx``
cannot see: the reader must read on, and commit, with a transaction started after it was
answered.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tms.errors import TmsError, TmsInvalidArgumentError
from tms.fetcher import FetchRequest
from tms.ids import MessageId
from tms.model import Message, TopicMetadata
from tms.subnowait import may_wait
from tms.subscription import SubscriptionId, Versioned, after, after_entry
from txn.transaction import Transaction

if TYPE_CHECKING:
    from tms.subscriptions import Subscriptions

__all__ = [
    "ASK_ROUNDS",
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "MAX_SCAN",
    "FinishedView",
    "SubscriptionPoll",
    "check_limit",
    "read_after_finish",
    "read_subscription",
]

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
MAX_SCAN = 100_000
ASK_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class SubscriptionPoll:
    """What a read returned (see the module docstring); ``version`` is the record's,
    to send back with a commit of ``position``. ``read_error``: the read failed after
    the commit riding on it was written (``Subscriptions.read``): no messages, the
    position is the start (just committed), ``version`` the committed record's.
    ``durable_version``: the record's version known durable when answered (None: it is
    ``version``); less than ``version`` when the commit riding on the read was answered
    before its write was durable (``commit_later``)."""

    messages: list[Message]
    start: MessageId
    position: MessageId
    version: int
    held: bool
    held_pointer: int | None
    read_error: TmsError | None = None
    durable_version: int | None = None


def check_limit(limit: int) -> None:
    """``TmsInvalidArgumentError`` unless ``limit`` is 1..``MAX_LIMIT``."""
    if not 0 < limit <= MAX_LIMIT:
        raise TmsInvalidArgumentError(f"a subscription's limit is 1..{MAX_LIMIT}, got {limit}")


def read_subscription(
    subs: Subscriptions,
    sub: SubscriptionId,
    *,
    start_from: MessageId | None = None,
    limit: int = DEFAULT_LIMIT,
    transaction: Transaction | None = None,
    max_scan: int = MAX_SCAN,
    current: tuple[TopicMetadata, Versioned] | None = None,
) -> SubscriptionPoll:
    """See the module docstring; ``current``: the topic and the record, when the caller
    has just read (or written) them."""
    check_limit(limit)
    metadata, record = current if current is not None else subs.record(sub)
    preferences = record.data.preferences
    if preferences.transactional and transaction is None:
        raise TmsInvalidArgumentError(
            f"subscription {sub} is transactional: read it with a transaction"
        )
    start = start_from
    if start is None:
        start = subs.resolved(sub, metadata, record, transaction).position
    flt = preferences.filter
    if flt is not None and current is None:  # (a committing read checked it before)
        may_wait("a filtered read")  # it may pass ``max_scan`` rows
    request = FetchRequest(
        start_id=start,
        inclusive=True,
        limit=limit if flt is None else max(limit, max_scan),
        transaction=transaction if preferences.transactional else None,
    )
    fetcher = subs.svc.read(sub.topic, request)
    messages: list[Message] = []
    last: Message | None = None
    exhausted = True
    for scanned, message in enumerate(fetcher, 1):
        last = message
        if flt is None or flt.matches(message[1]):
            messages.append(message)
        if len(messages) >= limit or scanned >= max_scan:
            exhausted = False
            break
    if not exhausted:
        assert last is not None
        position = after(last.id)
    elif fetcher.held_at is not None:
        position = max(start, MessageId(*fetcher.held_at))
    elif fetcher.end is not None:
        position = max(start, after_entry(*fetcher.end))
    else:
        position = start
    size = sum(len(m[1]) for m in messages)
    subs.svc.metrics.fetched(sub.topic, len(messages), size)
    return SubscriptionPoll(
        messages, start, position, record.version, fetcher.held, fetcher.held_pointer
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedView(Transaction):
    """A reader's transaction that also sees ``committed`` (pointers the manager said
    committed since it started); ``invalids`` include those it said are invalid. It
    writes nothing; only reads use it."""

    committed: frozenset[int] = frozenset()

    def is_visible(self, version: int) -> bool:
        return version in self.committed or Transaction.is_visible(self, version)


def finished_view(subs: Subscriptions, tx: Transaction, asks: Collection[int]) -> Transaction:
    """``tx`` updated with what the manager says now of ``asks`` (module docstring);
    ``tx`` itself when the service knows no transaction manager or cannot ask it (the
    poll then answers held, as without ``reread``)."""
    try:
        state = subs.svc.guard.state(sorted(asks))
    except TmsError:
        return tx
    if state is None:
        return tx
    committed = frozenset(
        p
        for p in asks
        if p <= state.write_pointer and p not in state.in_progress and p not in state.invalid
    )
    return FinishedView(
        transaction_id=tx.transaction_id,
        read_pointer=tx.read_pointer,
        invalids=tuple(sorted(set(tx.invalids) | (state.invalid & set(asks)))),
        in_progress=tx.in_progress,
        first_short_in_progress=tx.first_short_in_progress,
        type=tx.type,
        write_pointer=tx.write_pointer,
        checkpoint_write_pointers=tx.checkpoint_write_pointers,
        visibility_level=tx.visibility_level,
        committed=committed,
    )


def read_after_finish(
    subs: Subscriptions,
    sub: SubscriptionId,
    *,
    start_from: MessageId | None,
    limit: int,
    transaction: Transaction,
    finished: Collection[int],
) -> SubscriptionPoll:
    """Read as ``read_subscription`` does, with ``transaction`` brought up to date with
    what has finished (module docstring)."""
    asks = set(transaction.in_progress) | set(finished)
    for _ in range(ASK_ROUNDS):
        view = finished_view(subs, transaction, asks)
        poll = read_subscription(subs, sub, start_from=start_from, limit=limit, transaction=view)
        held = poll.held_pointer
        if view is transaction or not poll.held or held is None or held in asks:
            break
        asks.add(held)  # not asked about: it may have finished too
    return poll
