"""Byte codec of ``TransactionEdit`` (pure), compatible with Tephra's edit codecs V1-V4.

Layout (Java ``DataOutput``, big-endian), after one version byte (-1 .. -4)::

    V1: i64 writePointer, i32 stateOrdinal, i64 expiration, i64 commitPointer,
        bool canCommit, i32 nChanges, nChanges x (i32 len, bytes)
    V2: V1 + i64 visibilityUpperBound
    V3: V2 + i32 typeOrdinal (-1 = none), i32 nTruncate, nTruncate x i64,
        i64 truncateInvalidTxTime
    V4: V3 + i64 parentWritePointer, i32 nCheckpoints (-1 = none), nCheckpoints x i64

Encoding always writes V4 (version byte ``0xFC``); change keys are written sorted so the
bytes are deterministic. A local log record is an 8-byte big-endian sequence number
followed by the edit.

Huge change sets are sorted in chunks merged lazily (``sorted_keys``): one ``sorted``
call holds the GIL throughout (0.7 s for a million keys on the benchmark VM), which would
stall every other thread — the server's event loop included — for that long.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Collection, Iterable
from typing import Any

from txn.errors import CodecError
from txn.persist.edit import EditState, TransactionEdit
from txn.transaction import TransactionType

__all__ = [
    "CURRENT_VERSION",
    "TruncatedRecordError",
    "decode_edit",
    "decode_record",
    "encode_changes",
    "encode_edit",
    "encode_record",
    "sorted_keys",
]

CURRENT_VERSION = -4
_SUPPORTED = (-1, -2, -3, -4)

_TYPE_ORDINAL = {TransactionType.SHORT: 0, TransactionType.LONG: 1}
_ORDINAL_TYPE = {v: k for k, v in _TYPE_ORDINAL.items()}
_STATES = {s.value: s for s in EditState}

_HEAD = struct.Struct(">qiqq?i")  # writePointer, state, expiration, commitPointer, canCommit, n
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SEQ = struct.Struct(">q")


_SORT_CHUNK = 32_768


class TruncatedRecordError(CodecError):
    """The bytes end in the middle of a record (a torn write at the end of a log)."""


def sorted_keys(keys: Collection[bytes]) -> Iterable[bytes]:
    """``keys`` in ascending order; a huge collection is sorted in chunks and merged
    lazily, so that other threads get the GIL in between (see the module docstring)."""
    if len(keys) <= _SORT_CHUNK:
        return sorted(keys)
    items = list(keys)
    runs = [sorted(items[i : i + _SORT_CHUNK]) for i in range(0, len(items), _SORT_CHUNK)]
    return heapq.merge(*runs)


def encode_changes(changes: Collection[bytes]) -> bytes:
    """The change keys as an edit writes them: ascending, each an i32 length + bytes."""
    pack = _I32.pack
    parts = []
    for key in sorted_keys(changes):
        parts.append(pack(len(key)))
        parts.append(key)
    return b"".join(parts)


def encode_edit(edit: TransactionEdit, version: int = CURRENT_VERSION) -> bytes:
    """Encode ``edit`` with the given codec version (V4 unless a test asks otherwise)."""
    if version not in _SUPPORTED:
        raise CodecError(f"unknown edit codec version {version}")
    encoded = edit.encoded_changes
    parts = [
        struct.pack(">b", version),
        _HEAD.pack(
            edit.write_pointer,
            edit.state.value,
            edit.expiration_ms,
            edit.commit_pointer,
            edit.can_commit,
            len(edit.changes),
        ),
        encode_changes(edit.changes) if encoded is None else encoded,
    ]
    if version <= -2:
        parts.append(_I64.pack(edit.visibility_upper_bound))
    if version <= -3:
        type_ordinal = -1 if edit.type is None else _TYPE_ORDINAL[edit.type]
        truncate = sorted(edit.truncate_invalid_tx)
        parts.append(struct.pack(f">ii{len(truncate)}q", type_ordinal, len(truncate), *truncate))
        parts.append(_I64.pack(edit.truncate_invalid_tx_time))
    if version <= -4:
        parts.append(_I64.pack(edit.parent_write_pointer))
        cps = edit.checkpoint_pointers
        if cps is None:
            parts.append(_I32.pack(-1))
        else:
            parts.append(struct.pack(f">i{len(cps)}q", len(cps), *cps))
    return b"".join(parts)


def encode_record(sequence: int, edit: TransactionEdit) -> bytes:
    """One local-log record: 8-byte sequence number + V4 edit."""
    return _SEQ.pack(sequence) + encode_edit(edit)


class _Cursor:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def need(self, n: int) -> int:
        start = self.pos
        if self.pos + n > self.end:
            raise TruncatedRecordError(f"record truncated at byte {start}")
        self.pos += n
        return start

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        return fmt.unpack_from(self.buf, self.need(fmt.size))

    def i32(self) -> int:
        return int(_I32.unpack_from(self.buf, self.need(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack_from(self.buf, self.need(8))[0])

    def longs(self, n: int) -> tuple[int, ...]:
        if n < 0:
            raise CodecError(f"negative count {n}")
        return struct.unpack_from(f">{n}q", self.buf, self.need(8 * n))

    def raw(self, n: int) -> bytes:
        if n < 0:
            raise CodecError(f"negative length {n}")
        start = self.need(n)
        return bytes(self.buf[start : start + n])


def decode_edit(buf: bytes | memoryview, pos: int = 0) -> tuple[TransactionEdit, int]:
    """Decode one edit at ``pos``; return it and the position after it.

    Raises ``TruncatedRecordError`` when ``buf`` ends inside the record and
    ``CodecError`` when the bytes are not an edit.
    """
    c = _Cursor(buf, pos)
    (version,) = struct.unpack_from(">b", buf, c.need(1))
    if version not in _SUPPORTED:
        raise CodecError(f"TransactionEdit was serialized with an unknown codec version {version}")
    wp, state_ordinal, expiration, commit_pointer, can_commit, n_changes = c.unpack(_HEAD)
    state = _STATES.get(int(state_ordinal))
    if state is None:
        raise CodecError(f"State enum ordinal value is out of range: {state_ordinal}")
    if int(n_changes) < 0:
        raise CodecError(f"negative change count {n_changes}")
    changes = frozenset(c.raw(c.i32()) for _ in range(int(n_changes)))
    vub = c.i64() if version <= -2 else 0
    tx_type: TransactionType | None = None
    truncate: frozenset[int] = frozenset()
    truncate_time = 0
    if version <= -3:
        type_ordinal = c.i32()
        if type_ordinal >= 0:
            tx_type = _ORDINAL_TYPE.get(type_ordinal)
            if tx_type is None:
                raise CodecError(f"Type enum ordinal value is out of range: {type_ordinal}")
        truncate = frozenset(c.longs(c.i32()))
        truncate_time = c.i64()
    parent = 0
    checkpoints: tuple[int, ...] | None = None
    if version <= -4:
        parent = c.i64()
        n_cps = c.i32()
        if n_cps >= 0:
            checkpoints = c.longs(n_cps)
    edit = TransactionEdit(
        state=state,
        write_pointer=int(wp),
        visibility_upper_bound=vub,
        commit_pointer=int(commit_pointer),
        expiration_ms=int(expiration),
        changes=changes,
        can_commit=bool(can_commit),
        type=tx_type,
        truncate_invalid_tx=truncate,
        truncate_invalid_tx_time=truncate_time,
        parent_write_pointer=parent,
        checkpoint_pointers=checkpoints,
    )
    return edit, c.pos


def decode_record(buf: bytes | memoryview, pos: int = 0) -> tuple[int, TransactionEdit, int]:
    """Decode one local-log record; return (sequence, edit, next position)."""
    if pos + 8 > len(buf):
        raise TruncatedRecordError(f"record truncated at byte {pos}")
    (seq,) = _SEQ.unpack_from(buf, pos)
    edit, end = decode_edit(buf, pos + 8)
    return int(seq), edit, end
