"""Value objects of the manager's state: in-progress entries and snapshots.

These are what the snapshot codec reads and writes and what ``get_snapshot`` returns.
Change keys are raw ``bytes`` compared by content (Tephra's ``ChangeId``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from txn.transaction import MAX_TX_PER_MS

__all__ = [
    "ChangeSet",
    "InProgressTx",
    "InProgressType",
    "TransactionSnapshot",
    "WritePointerState",
    "expiration_from_write_pointer",
    "resolve_legacy_types",
]


class InProgressType(enum.Enum):
    """Kind of an in-progress entry; checkpoints are entries of their own."""

    SHORT = 0
    LONG = 1
    CHECKPOINT = 2


@dataclass(frozen=True, slots=True)
class InProgressTx:
    """One in-progress write pointer.

    ``type`` is ``None`` only for entries read from a version-1 snapshot before
    ``resolve_legacy_types`` has run. ``client_id`` is never persisted and does not take
    part in equality.
    """

    visibility_upper_bound: int
    expiration_ms: int
    type: InProgressType | None
    checkpoint_write_pointers: tuple[int, ...] = ()
    client_id: str | None = field(default=None, compare=False)

    @property
    def is_long_running(self) -> bool:
        """LONG entries (legacy: expiration -1); CHECKPOINT entries are not long-running."""
        if self.type is None:
            return self.expiration_ms == -1
        return self.type is InProgressType.LONG


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """The change keys a transaction declared, and (optionally) who declared them."""

    changes: frozenset[bytes]
    client_id: str | None = field(default=None, compare=False)
    encoded: bytes | None = field(default=None, compare=False, repr=False)
    """The keys as a log edit writes them (``edit_codec.encode_changes``), when they were
    encoded ahead of time (large sets), so a later edit does not encode them again."""


@dataclass(frozen=True)
class TransactionSnapshot:
    """The manager's whole state at one instant (Tephra's ``TransactionSnapshot``).

    ``timestamp_ms`` does not take part in equality. Mappings must not be mutated.
    ``invalid`` is sorted ascending; ``in_progress`` and ``committed`` iterate in
    ascending key order.
    """

    timestamp_ms: int = field(compare=False)
    read_pointer: int
    write_pointer: int
    invalid: tuple[int, ...]
    in_progress: Mapping[int, InProgressTx]
    committing: Mapping[int, frozenset[bytes]]
    committed: Mapping[int, frozenset[bytes]]

    def visibility_upper_bound(self) -> int:
        """The first in-progress entry's bound, else the read pointer."""
        for entry in self.in_progress.values():
            return entry.visibility_upper_bound
        return self.read_pointer


@dataclass(frozen=True, slots=True)
class WritePointerState:
    """What a service checking the write pointers it is given needs to know, read at one
    instant (``TxClient.write_pointer_state``): ``write_pointer``, the newest pointer
    issued so far (later ones do not exist yet); ``in_progress``, every pointer in
    progress, checkpoint pointers included; ``invalid``, those of the pointers asked
    about that are in the invalid list. A pointer at or below ``write_pointer`` that is
    in neither was committed, aborted, or never issued."""

    write_pointer: int
    in_progress: frozenset[int]
    invalid: frozenset[int]


def expiration_from_write_pointer(write_pointer: int, timeout_s: int) -> int:
    """Expiration (epoch ms) of a transaction started at ``write_pointer``."""
    return write_pointer // MAX_TX_PER_MS + timeout_s * 1000


def resolve_legacy_types(
    in_progress: Mapping[int, InProgressTx], long_timeout_s: int, tolerance_ms: int = 10_000
) -> dict[int, InProgressTx]:
    """Give typeless (version-1) entries a type, as Tephra's ``txnBackwardsCompatCheck``.

    An entry is LONG when its expiration is negative or within ``tolerance_ms`` of what a
    long transaction started at its write pointer would have; it then gets that
    expiration. Otherwise it is SHORT.
    """
    resolved: dict[int, InProgressTx] = {}
    for wp, entry in in_progress.items():
        if entry.type is not None:
            resolved[wp] = entry
            continue
        long_expiration = expiration_from_write_pointer(wp, long_timeout_s)
        if entry.expiration_ms < 0 or long_expiration - entry.expiration_ms < tolerance_ms:
            resolved[wp] = InProgressTx(
                entry.visibility_upper_bound,
                long_expiration,
                InProgressType.LONG,
                entry.checkpoint_write_pointers,
                entry.client_id,
            )
        else:
            resolved[wp] = InProgressTx(
                entry.visibility_upper_bound,
                entry.expiration_ms,
                InProgressType.SHORT,
                entry.checkpoint_write_pointers,
                entry.client_id,
            )
    return resolved
