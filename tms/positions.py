"""Transactional positions: a subscription's position written as part of a transaction
(DESIGN_NOTES 11).

For exactly-once consume → process → publish, a consumer's new position must commit
with its outputs or not at all. So it is treated like a transactional message: written
by the topic's writer, under the transaction's write pointer, into a row of its own
(``tms.codec.subscriptions``: table ``c``, keyed by topic generation, subscription name
and write pointer), and never updated in place — a position changed at ``persist`` time
would be visible too early.

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tms.codec import keys
from tms.codec.subscriptions import (
    PositionRow,
    decode_position_key,
    decode_position_value,
    encode_position_value,
    position_key,
    position_prefix,
)
from tms.ids import MessageId
from tms.store.kv import TableStore, WriteOp
from tms.subscription import SubscriptionId, SubscriptionState
from txn.state import WritePointerState
from txn.transaction import NO_TX_IN_PROGRESS, Transaction

__all__ = [
    "POSITION_TABLE",
    "PositionRollback",
    "PositionTable",
    "PositionWrite",
    "Resolved",
    "change_key",
    "fresh_view",
    "resolve",
    "superseded_by",
]

POSITION_TABLE = b"c"


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


class PositionTable:
    """The rows of transactional positions in one ``TableStore``."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def rows(self, topic_prefix: bytes, name: str) -> list[PositionRow]:
        """One subscription's rows in a topic generation, by write pointer."""
        prefix = position_prefix(topic_prefix, name)
        return [
            decode_position_value(int.from_bytes(key[-8:], "big", signed=True), value)
            for key, value in self.store.scan(prefix, keys.stop_key_for_prefix(prefix))
        ]

    def all_rows(self, topic_prefix: bytes) -> dict[str, list[PositionRow]]:
        """Every subscription's rows in a topic generation, by name."""
        found: dict[str, list[PositionRow]] = {}
        for key, value in self.store.scan(topic_prefix, keys.stop_key_for_prefix(topic_prefix)):
            name, wp = decode_position_key(key, topic_prefix)
            found.setdefault(name, []).append(decode_position_value(wp, value))
        return found

    def exists(self, topic_prefix: bytes, name: str, write_pointer: int) -> bool:
        return self.store.get(position_key(topic_prefix, name, write_pointer)) is not None


@dataclass(frozen=True, slots=True)
class PositionWrite:
    """A write operation of the topic writer: the position ``position`` of subscription
    ``name`` under ``write_pointer`` (checked in progress by the service's guard), with
    the stamp of the state it was read from; ``superseded``: write pointers of the
    subscription's rows to delete in the same batch (see "Compaction")."""

    name: str
    write_pointer: int
    stamp: int
    position: MessageId
    written_ms: int
    superseded: tuple[int, ...] = field(default=())

    def write_ops(self, topic_prefix: bytes) -> list[WriteOp]:
        ops: list[WriteOp] = [
            (POSITION_TABLE, position_key(topic_prefix, self.name, wp), None)
            for wp in self.superseded
        ]
        ops.append(
            (
                POSITION_TABLE,
                position_key(topic_prefix, self.name, self.write_pointer),
                encode_position_value(self.stamp, self.position, self.written_ms),
            )
        )
        return ops


@dataclass(frozen=True, slots=True)
class PositionRollback:
    """A write operation of the topic writer: delete subscription ``name``'s row under
    ``write_pointer`` (checked in progress or invalid — never committed — by the guard).
    Its result is how many rows were deleted (0 or 1; 0 on a repeat)."""

    name: str
    write_pointer: int

    def write_ops(self, table: PositionTable, topic_prefix: bytes) -> list[WriteOp]:
        if not table.exists(topic_prefix, self.name, self.write_pointer):
            return []
        return [(POSITION_TABLE, position_key(topic_prefix, self.name, self.write_pointer), None)]


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
