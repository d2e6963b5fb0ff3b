"""TransactionEdit codec: Tephra's golden bytes, older versions, round trips, torn input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given

from tests.txn.persist.strategies import edits
from txn.errors import CodecError
from txn.persist.edit import EditState, TransactionEdit
from txn.persist.edit_codec import (
    TruncatedRecordError,
    decode_edit,
    decode_record,
    encode_edit,
    encode_record,
)
from txn.transaction import TransactionType

# createStarted(2, 1, 1000, SHORT), written with codec V4 (version byte 0xFC).
GOLDEN_STARTED = bytes.fromhex(
    "fc" "0000000000000002" "00000000" "00000000000003e8" "0000000000000000" "00" "00000000"
    "0000000000000001" "00000000" "00000000" "0000000000000000" "0000000000000000" "ffffffff"
)  # fmt: skip


def test_golden_started_edit() -> None:
    edit = TransactionEdit.started(2, 1, 1000, TransactionType.SHORT)
    assert encode_edit(edit) == GOLDEN_STARTED
    assert len(GOLDEN_STARTED) == 70
    assert decode_edit(GOLDEN_STARTED) == (edit, 70)


def test_golden_committed_edit_with_changes_field_by_field() -> None:
    edit = TransactionEdit.committed(5, frozenset({b"b", b"a"}), 9, True)
    expected = (
        b"\xfc"
        + struct.pack(">qiqq?i", 5, EditState.COMMITTED.value, 0, 9, True, 2)
        + struct.pack(">i", 1) + b"a" + struct.pack(">i", 1) + b"b"
        + struct.pack(">q", 0)  # visibility upper bound
        + struct.pack(">ii", -1, 0) + struct.pack(">q", 0)  # type, truncate set, time
        + struct.pack(">qi", 0, -1)  # parent, no checkpoints
    )  # fmt: skip
    assert encode_edit(edit) == expected


def test_golden_aborted_edit_with_checkpoints() -> None:
    edit = TransactionEdit.aborted(10, TransactionType.LONG, (11, 12))
    data = encode_edit(edit)
    assert data[-(8 + 4 + 16) :] == struct.pack(">qiqq", 0, 2, 11, 12)
    assert decode_edit(data)[0] == edit


@pytest.mark.parametrize("version", [-1, -2, -3])
def test_older_versions_decode(version: int) -> None:
    edit = TransactionEdit.started(2, 1, 1000, TransactionType.LONG)
    decoded, _ = decode_edit(encode_edit(edit, version))
    assert decoded.write_pointer == 2 and decoded.expiration_ms == 1000
    assert decoded.state is EditState.INPROGRESS
    assert decoded.visibility_upper_bound == (0 if version == -1 else 1)
    assert decoded.type is (None if version in (-1, -2) else TransactionType.LONG)
    assert decoded.checkpoint_pointers is None


@given(edits)
def test_round_trip(edit: TransactionEdit) -> None:
    data = encode_edit(edit)
    assert decode_edit(data) == (edit, len(data))


@given(edits)
def test_every_strict_prefix_is_reported_as_truncated(edit: TransactionEdit) -> None:
    record = encode_record(3, edit)
    for cut in range(len(record)):
        with pytest.raises(TruncatedRecordError):
            decode_record(record[:cut])


def test_records_chain() -> None:
    a, b = TransactionEdit.invalid(1), TransactionEdit.checkpoint(3, 2)
    data = encode_record(0, a) + encode_record(1, b)
    seq, edit, pos = decode_record(data)
    assert (seq, edit) == (0, a)
    assert decode_record(data, pos)[:2] == (1, b)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x07" + b"\x00" * 40, "unknown codec version 7"),
        (b"\xfc" + struct.pack(">qi", 1, 99) + b"\x00" * 60, "out of range: 99"),
        (b"\xfc" + struct.pack(">qiqq?i", 1, 0, 0, 0, False, -5) + b"\x00" * 60, "negative"),
    ],
)
def test_bad_bytes(data: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_edit(data)


def test_large_sets_encode_the_same_sorted_in_chunks_and_ahead_of_time() -> None:
    import random

    from txn.persist.edit_codec import encode_changes, sorted_keys

    rng = random.Random(5)
    keys = frozenset(rng.randbytes(rng.randint(0, 12)) for _ in range(100_000))
    assert list(sorted_keys(keys)) == sorted(keys)  # merged from sorted chunks
    block = encode_changes(keys)
    ahead = TransactionEdit.committed(7, keys, 9, True, block)
    assert ahead == TransactionEdit.committed(7, keys, 9, True)
    assert encode_edit(ahead) == encode_edit(TransactionEdit.committed(7, keys, 9, True))
    edit, _end = decode_edit(encode_edit(ahead))
    assert edit.changes == keys
