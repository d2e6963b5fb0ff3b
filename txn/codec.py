"""``TransactionCodec``: a ``Transaction`` as Tephra serialises it (pure, no I/O).

The bytes are a bare Thrift binary-protocol struct of ``TTransaction`` (no message
header), identical to Tephra's ``TransactionCodec.encode``: fields 1..9 in order, i64 and
i32 big-endian, lists as ``elem-type size elements``, closed by a STOP byte.

Decoding follows Tephra's ``TransactionConverterUtils.unwrap``: missing lists are empty,
a missing or unknown visibility level is ``SNAPSHOT``, a type other than SHORT (missing
included) is ``LONG``, missing numbers are 0. Unknown fields are skipped, as generated
Thrift code does. Trailing bytes after STOP are ignored (Thrift's deserializer does too).
"""

from __future__ import annotations

import struct

from txn.errors import CodecError
from txn.transaction import Transaction, TransactionType, VisibilityLevel

__all__ = [
    "THRIFT_TO_VISIBILITY",
    "TYPE_TO_THRIFT",
    "VISIBILITY_TO_THRIFT",
    "decode_transaction",
    "encode_transaction",
]

# Thrift type ids.
T_STOP, T_BOOL, T_BYTE, T_DOUBLE, T_I16, T_I32, T_I64, T_STRING = 0, 2, 3, 4, 6, 8, 10, 11
T_STRUCT, T_MAP, T_SET, T_LIST = 12, 13, 14, 15

# Thrift values of Tephra's enums (TTransactionType, TVisibilityLevel).
TYPE_TO_THRIFT = {TransactionType.SHORT: 1, TransactionType.LONG: 2}
VISIBILITY_TO_THRIFT = {
    VisibilityLevel.SNAPSHOT: 1,
    VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT: 2,
    VisibilityLevel.SNAPSHOT_ALL: 3,
}
THRIFT_TO_VISIBILITY = {v: k for k, v in VISIBILITY_TO_THRIFT.items()}

_BYTE = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAP_HEAD = struct.Struct(">bbi")
_COLL_HEAD = struct.Struct(">bi")


def _layout(invalids: int, in_progress: int, checkpoints: int) -> struct.Struct:
    """The whole struct's layout for the given list lengths (one ``pack`` per encode)."""
    return struct.Struct(
        f">bhq bhq bhbi{invalids}q bhbi{in_progress}q bhq bhi bhq bhbi{checkpoints}q bhi b"
    )


_LAYOUTS: dict[tuple[int, int, int], struct.Struct] = {}


def encode_transaction(tx: Transaction) -> bytes:
    """Encode ``tx`` exactly as Tephra's ``TransactionCodec`` does (all nine fields)."""
    invalids, in_progress, cps = tx.invalids, tx.in_progress, tx.checkpoint_write_pointers
    shape = (len(invalids), len(in_progress), len(cps))
    layout = _LAYOUTS.get(shape)
    if layout is None:
        if len(_LAYOUTS) >= 512:
            _LAYOUTS.clear()
        layout = _LAYOUTS[shape] = _layout(*shape)
    return layout.pack(
        T_I64, 1, tx.transaction_id,
        T_I64, 2, tx.read_pointer,
        T_LIST, 3, T_I64, shape[0], *invalids,
        T_LIST, 4, T_I64, shape[1], *in_progress,
        T_I64, 5, tx.first_short_in_progress,
        T_I32, 6, TYPE_TO_THRIFT[tx.type],
        T_I64, 7, tx.write_pointer,
        T_LIST, 8, T_I64, shape[2], *cps,
        T_I32, 9, VISIBILITY_TO_THRIFT[tx.visibility_level],
        T_STOP,
    )  # fmt: skip


class _Reader:
    """A bounds-checked cursor over Thrift binary bytes."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> int:
        start = self.pos
        end = start + n
        if n < 0 or end > len(self.data):
            raise CodecError(f"TTransaction truncated at byte {start} (needed {n} more)")
        self.pos = end
        return start

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        start = self.take(fmt.size)
        return fmt.unpack_from(self.data, start)

    def i64_list(self, elem_type: int, size: int) -> tuple[int, ...]:
        if elem_type != T_I64:
            raise CodecError(f"list of type {elem_type} where list<i64> was expected")
        start = self.take(8 * size)
        return struct.unpack_from(f">{size}q", self.data, start)

    def skip(self, ttype: int, depth: int = 0) -> None:
        if depth > 64:
            raise CodecError("Thrift value nested too deeply")
        fixed = {T_BOOL: 1, T_BYTE: 1, T_DOUBLE: 8, T_I16: 2, T_I32: 4, T_I64: 8}
        if ttype in fixed:
            self.take(fixed[ttype])
        elif ttype == T_STRING:
            (size,) = self.unpack(_I32)
            self.take(size)
        elif ttype == T_STRUCT:
            while True:
                (ftype,) = self.unpack(_BYTE)
                if ftype == T_STOP:
                    return
                self.take(2)
                self.skip(ftype, depth + 1)
        elif ttype == T_MAP:
            ktype, vtype, size = self.unpack(_MAP_HEAD)
            self._check_size(size)
            for _ in range(size):
                self.skip(ktype, depth + 1)
                self.skip(vtype, depth + 1)
        elif ttype in (T_SET, T_LIST):
            etype, size = self.unpack(_COLL_HEAD)
            self._check_size(size)
            for _ in range(size):
                self.skip(etype, depth + 1)
        else:
            raise CodecError(f"unknown Thrift type id {ttype}")

    def _check_size(self, size: int) -> None:
        if size < 0 or size > len(self.data) - self.pos:
            raise CodecError(f"bad collection size {size}")


_HEAD_12 = struct.Struct(">bhq bhq bhbi")  # fields 1, 2 and the head of list 3
_LIST_4 = struct.Struct(">bhbi")
_MIDDLE_5_TO_8 = struct.Struct(">bhq bhi bhq bhbi")  # fields 5, 6, 7 and the head of list 8
_TAIL_9 = struct.Struct(">bhib")  # field 9 and STOP


def _i64s(data: bytes, pos: int, count: int) -> tuple[tuple[int, ...], int] | None:
    """``count`` i64s at ``pos`` and the position after them; None past the end."""
    if not 0 <= count <= (len(data) - pos) // 8:
        return None
    return struct.unpack_from(f">{count}q", data, pos), pos + 8 * count


def _decode_standard(data: bytes) -> Transaction | None:
    """``data`` in exactly the layout ``encode_transaction`` writes (Tephra's), else None:
    a few unpacks instead of a loop over fields."""
    if len(data) < _HEAD_12.size:
        return None
    t1, f1, tx_id, t2, f2, read_pointer, t3, f3, e3, n3 = _HEAD_12.unpack_from(data)
    if (t1, f1, t2, f2, t3, f3, e3) != (T_I64, 1, T_I64, 2, T_LIST, 3, T_I64):
        return None
    invalids = _i64s(data, _HEAD_12.size, n3)
    if invalids is None or len(data) < invalids[1] + _LIST_4.size:
        return None
    t4, f4, e4, n4 = _LIST_4.unpack_from(data, invalids[1])
    in_progress = _i64s(data, invalids[1] + _LIST_4.size, n4)
    if (t4, f4, e4) != (T_LIST, 4, T_I64) or in_progress is None:
        return None
    pos = in_progress[1]
    if len(data) < pos + _MIDDLE_5_TO_8.size:
        return None
    t5, f5, first, t6, f6, kind, t7, f7, wp, t8, f8, e8, n8 = _MIDDLE_5_TO_8.unpack_from(data, pos)
    if (t5, f5, t6, f6, t7, f7, t8, f8, e8) != (T_I64, 5, T_I32, 6, T_I64, 7, T_LIST, 8, T_I64):
        return None
    checkpoints = _i64s(data, pos + _MIDDLE_5_TO_8.size, n8)
    if checkpoints is None or len(data) < checkpoints[1] + _TAIL_9.size:
        return None
    t9, f9, visibility, stop = _TAIL_9.unpack_from(data, checkpoints[1])
    if (t9, f9, stop) != (T_I32, 9, T_STOP):
        return None
    return Transaction(
        transaction_id=tx_id,
        read_pointer=read_pointer,
        invalids=invalids[0],
        in_progress=in_progress[0],
        first_short_in_progress=first,
        type=TransactionType.SHORT if kind == 1 else TransactionType.LONG,
        write_pointer=wp,
        checkpoint_write_pointers=checkpoints[0],
        visibility_level=THRIFT_TO_VISIBILITY.get(visibility, VisibilityLevel.SNAPSHOT),
    )


def decode_transaction(data: bytes) -> Transaction:
    """Decode Tephra ``TransactionCodec`` bytes; raise ``CodecError`` if they are malformed."""
    standard = _decode_standard(data)
    return standard if standard is not None else _decode_fields(data)


def _decode_fields(data: bytes) -> Transaction:
    """The general decoder: fields in any order, missing or unknown ones."""
    r = _Reader(bytes(data))
    longs: dict[int, int] = {}
    lists: dict[int, tuple[int, ...]] = {}
    ints: dict[int, int] = {}
    while True:
        (ftype,) = r.unpack(_BYTE)
        if ftype == T_STOP:
            break
        (fid,) = r.unpack(_I16)
        if fid in (1, 2, 5, 7) and ftype == T_I64:
            (longs[fid],) = r.unpack(_I64)
        elif fid in (3, 4, 8) and ftype == T_LIST:
            etype, size = r.unpack(_COLL_HEAD)
            if size < 0:
                raise CodecError(f"negative list size {size}")
            lists[fid] = r.i64_list(etype, size)
        elif fid in (6, 9) and ftype == T_I32:
            (ints[fid],) = r.unpack(_I32)
        else:
            r.skip(ftype)
    return Transaction(
        transaction_id=longs.get(1, 0),
        read_pointer=longs.get(2, 0),
        invalids=lists.get(3, ()),
        in_progress=lists.get(4, ()),
        first_short_in_progress=longs.get(5, 0),
        type=TransactionType.SHORT if ints.get(6) == 1 else TransactionType.LONG,
        write_pointer=longs.get(7, 0),
        checkpoint_write_pointers=lists.get(8, ()),
        visibility_level=THRIFT_TO_VISIBILITY.get(ints.get(9, 1), VisibilityLevel.SNAPSHOT),
    )
