"""Transactional positions: a subscription's position written as part of a transaction
(DESIGN_NOTES 11).

For exactly-once consume → process → publish, a consumer's new position must commit
with its outputs or not at all. So it is treated like a transactional message: written
by the topic's writer, under the transaction's write pointer, into a row of its own
(``tms.codec.subscriptions``: table ``c``, keyed by topic generation, subscription name
and write pointer), and never updated in place — a position changed at ``persist`` time
would be visible too early. The write is an operation of its own
(``tms.operations.WritePosition``; ``RollbackPosition`` removes it), its rows in
``tms.store.positions``.

**Resolution** (``resolve``): a reader with transaction ``tx`` sees the position of the
newest row (largest write pointer) that ``tx`` sees — committed before its snapshot, or
its own — among the rows whose ``stamp`` is the subscription state's; with none, the
stored state's position. In-progress, invalid and rolled-back (deleted) rows are never
seen, exactly as for messages. A reader without a transaction (``GET``, lag) resolves
with a *fresh view*: a transaction-like snapshot built from the manager's write-pointer
state (``fresh_view``): every issued pointer that is neither in progress nor invalid
counts as committed. Without a transaction manager there is no view, and rows are not
considered.

**Superseding.** A non-transactional move of the position (commit, seek, reset) writes a
new ``stamp`` into the state: rows written before it stop counting, including those of
transactions still in progress. Concurrent transactional consumers of one subscription
are serialized by the transaction manager's conflict detection (their change key,
``change_key``): of two overlapping transactions at most one commits.

**Compaction.** When a row is written, rows of older stamps and the committed rows that
the writing transaction's newest visible committed row supersedes are deleted in the
same batch (the newest committed one is kept until the new row commits: if it aborts,
that one is the position again). Rollback deletes the rows of the transaction's write
pointers; cleanup deletes the rows of invalid transactions and of old generations.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tms.codec.subscriptions import PositionRow
from tms.ids import MessageId
from tms.subscription import SubscriptionId, SubscriptionState
from txn.state import WritePointerState
from txn.transaction import NO_TX_IN_PROGRESS, Transaction

__all__ = [
    "Resolved",
    "change_key",
    "doomed_rows",
    "fresh_view",
    "resolve",
    "superseded_by",
]


def change_key(sub: SubscriptionId) -> bytes:
    """The change key of a transaction that moves ``sub``'s position: two overlapping
    transactions declaring it conflict, so at most one of them commits."""
    return b"tms.subscription\x00" + str(sub).encode()


def fresh_view(state: WritePointerState) -> Transaction:
    """A snapshot that sees every pointer of ``state`` issued and no longer in progress
    as committed (invalid ones excluded: ``state.invalid`` must hold every pointer the
    view will be asked about). It writes nothing and is not itself a transaction."""
    return Transaction(
        transaction_id=NO_TX_IN_PROGRESS,
        read_pointer=state.write_pointer,
        invalids=tuple(sorted(state.invalid)),
        in_progress=tuple(sorted(state.in_progress)),
        write_pointer=NO_TX_IN_PROGRESS,
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where a subscription's next read starts for one reader: ``position``, from the row
    of ``write_pointer`` (None: from the stored state), last moved at ``updated_ms``."""

    position: MessageId
    write_pointer: int | None
    updated_ms: int


def resolve(
    state: SubscriptionState, rows: Iterable[PositionRow], view: Transaction | None
) -> Resolved:
    """See the module docstring."""
    newest: PositionRow | None = None
    if view is not None:
        for row in rows:
            if (
                row.stamp == state.stamp
                and view.is_visible(row.write_pointer)
                and (newest is None or row.write_pointer > newest.write_pointer)
            ):
                newest = row
    if newest is None:
        return Resolved(state.position, None, state.updated_ms)
    return Resolved(newest.position, newest.write_pointer, newest.written_ms)


def superseded_by(
    state: SubscriptionState, rows: Sequence[PositionRow], tx: Transaction
) -> tuple[int, ...]:
    """The rows a new row of ``tx`` may delete (see "Compaction"): other stamps, and the
    committed rows ``tx`` sees except the newest of them. ``tx``'s own rows stay (its
    rollback removes them)."""
    committed = [
        r.write_pointer
        for r in rows
        if r.stamp == state.stamp
        and tx.is_visible(r.write_pointer)
        and not tx.is_current_write(r.write_pointer)
    ]
    newest = max(committed, default=None)
    stale = [r.write_pointer for r in rows if r.stamp != state.stamp]
    return tuple(sorted(stale + [wp for wp in committed if wp != newest]))


def doomed_rows(
    rows: Mapping[str, Sequence[PositionRow]],
    stamps: Mapping[str, int],
    invalid: frozenset[int],
) -> Iterator[tuple[str, list[int], int]]:
    """Cleanup's choice among a topic generation's ``rows`` (by subscription name): per
    subscription, the write pointers of rows to delete — of ``invalid`` transactions, of
    a subscription not in ``stamps`` (gone) or of another stamp than its state's
    (superseded) — and how many of them were invalid. ``stamps`` must be listed after
    the rows were read: a subscription made since has another stamp than older rows."""
    for name, found in rows.items():
        doomed = [
            r.write_pointer
            for r in found
            if r.write_pointer in invalid or stamps.get(name) != r.stamp
        ]
        if doomed:
            yield name, doomed, sum(1 for wp in doomed if wp in invalid)
