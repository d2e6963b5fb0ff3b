"""``TransactionEdit``: one write-ahead-log record, as Tephra defines it.

Every state change of the manager is one edit; replaying the edits in log order over the
newest snapshot reproduces the state. Unset fields are 0, ``False``, empty or ``None``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from txn.transaction import TransactionType

__all__ = ["EditState", "TransactionEdit"]


class EditState(enum.Enum):
    """Edit kinds; the values are the ordinals written to the log."""

    INPROGRESS = 0
    COMMITTING = 1
    COMMITTED = 2
    INVALID = 3
    ABORTED = 4
    MOVE_WATERMARK = 5
    TRUNCATE_INVALID_TX = 6
    CHECKPOINT = 7
    TIMEOUT_EXTENDED = 8
    """txms's own (not Tephra's): an in-progress transaction's new expiration."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionEdit:
    """A log record; build it with one of the factory class methods."""

    state: EditState
    write_pointer: int = 0
    visibility_upper_bound: int = 0
    commit_pointer: int = 0
    expiration_ms: int = 0
    changes: frozenset[bytes] = frozenset()
    can_commit: bool = False
    type: TransactionType | None = None
    truncate_invalid_tx: frozenset[int] = frozenset()
    truncate_invalid_tx_time: int = 0
    parent_write_pointer: int = 0
    checkpoint_pointers: tuple[int, ...] | None = None
    encoded_changes: bytes | None = field(default=None, compare=False, repr=False)
    """``changes`` already encoded (``edit_codec.encode_changes``), or None: the codec
    encodes them. Lets a large set be encoded once, off the thread that writes the log."""

    @classmethod
    def started(
        cls,
        write_pointer: int,
        visibility_upper_bound: int,
        expiration_ms: int,
        type: TransactionType,
    ) -> TransactionEdit:
        return cls(
            state=EditState.INPROGRESS,
            write_pointer=write_pointer,
            visibility_upper_bound=visibility_upper_bound,
            expiration_ms=expiration_ms,
            type=type,
        )

    @classmethod
    def committing(
        cls, write_pointer: int, changes: frozenset[bytes], encoded: bytes | None = None
    ) -> TransactionEdit:
        return cls(
            state=EditState.COMMITTING,
            write_pointer=write_pointer,
            changes=changes,
            encoded_changes=encoded,
        )

    @classmethod
    def committed(
        cls,
        write_pointer: int,
        changes: frozenset[bytes],
        commit_pointer: int,
        can_commit: bool,
        encoded: bytes | None = None,
    ) -> TransactionEdit:
        """``can_commit`` means "add the changes to the committed sets"."""
        return cls(
            state=EditState.COMMITTED,
            write_pointer=write_pointer,
            changes=changes,
            commit_pointer=commit_pointer,
            can_commit=can_commit,
            encoded_changes=encoded,
        )

    @classmethod
    def aborted(
        cls,
        write_pointer: int,
        type: TransactionType | None,
        checkpoint_pointers: tuple[int, ...] | None,
    ) -> TransactionEdit:
        return cls(
            state=EditState.ABORTED,
            write_pointer=write_pointer,
            type=type,
            checkpoint_pointers=checkpoint_pointers,
        )

    @classmethod
    def invalid(cls, write_pointer: int) -> TransactionEdit:
        return cls(state=EditState.INVALID, write_pointer=write_pointer)

    @classmethod
    def move_watermark(cls, write_pointer: int) -> TransactionEdit:
        return cls(state=EditState.MOVE_WATERMARK, write_pointer=write_pointer)

    @classmethod
    def truncate_invalid(cls, ids: Iterable[int]) -> TransactionEdit:
        return cls(state=EditState.TRUNCATE_INVALID_TX, truncate_invalid_tx=frozenset(ids))

    @classmethod
    def truncate_invalid_before(cls, time_ms: int) -> TransactionEdit:
        return cls(state=EditState.TRUNCATE_INVALID_TX, truncate_invalid_tx_time=time_ms)

    @classmethod
    def checkpoint(cls, write_pointer: int, parent_write_pointer: int) -> TransactionEdit:
        return cls(
            state=EditState.CHECKPOINT,
            write_pointer=write_pointer,
            parent_write_pointer=parent_write_pointer,
        )

    @classmethod
    def timeout_extended(cls, write_pointer: int, expiration_ms: int) -> TransactionEdit:
        return cls(
            state=EditState.TIMEOUT_EXTENDED,
            write_pointer=write_pointer,
            expiration_ms=expiration_ms,
        )
