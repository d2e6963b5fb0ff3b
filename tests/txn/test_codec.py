"""TransactionCodec: golden bytes (Tephra's encoding), defaults, round trips."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txn.codec import _decode_fields, _decode_standard, decode_transaction, encode_transaction
from txn.errors import CodecError
from txn.transaction import NO_TX_IN_PROGRESS, Transaction, TransactionType, VisibilityLevel

GOLDEN_83 = bytes.fromhex(
    "0a0001" "00000000000000c8" "0a0002" "0000000000000064"
    "0f0003" "0a" "00000000" "0f0004" "0a" "00000000"
    "0a0005" "7fffffffffffffff" "080006" "00000001" "0a0007" "00000000000000c8"
    "0f0008" "0a" "00000000" "080009" "00000001" "00"
)  # fmt: skip


def test_golden_83_byte_example() -> None:
    tx = Transaction(
        transaction_id=200,
        read_pointer=100,
        first_short_in_progress=NO_TX_IN_PROGRESS,
        write_pointer=200,
    )
    encoded = encode_transaction(tx)
    assert len(encoded) == 83
    assert encoded == GOLDEN_83
    assert decode_transaction(GOLDEN_83) == tx


def test_golden_with_lists_built_field_by_field() -> None:
    tx = Transaction(
        transaction_id=7,
        read_pointer=5,
        invalids=(1, 2),
        in_progress=(3,),
        first_short_in_progress=3,
        type=TransactionType.LONG,
        write_pointer=9,
        checkpoint_write_pointers=(8, 9),
        visibility_level=VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT,
    )
    expected = b"".join(
        [
            b"\x0a\x00\x01" + struct.pack(">q", 7),
            b"\x0a\x00\x02" + struct.pack(">q", 5),
            b"\x0f\x00\x03\x0a" + struct.pack(">iqq", 2, 1, 2),
            b"\x0f\x00\x04\x0a" + struct.pack(">iq", 1, 3),
            b"\x0a\x00\x05" + struct.pack(">q", 3),
            b"\x08\x00\x06" + struct.pack(">i", 2),
            b"\x0a\x00\x07" + struct.pack(">q", 9),
            b"\x0f\x00\x08\x0a" + struct.pack(">iqq", 2, 8, 9),
            b"\x08\x00\x09" + struct.pack(">i", 2),
            b"\x00",
        ]
    )
    assert encode_transaction(tx) == expected
    assert decode_transaction(expected) == tx


def test_missing_fields_take_tephra_defaults() -> None:
    # Only the transaction id: lists empty, type LONG, visibility SNAPSHOT, numbers 0.
    data = b"\x0a\x00\x01" + struct.pack(">q", 42) + b"\x00"
    tx = decode_transaction(data)
    assert tx.transaction_id == 42
    assert tx.read_pointer == 0 and tx.write_pointer == 0 and tx.first_short_in_progress == 0
    assert tx.invalids == () and tx.in_progress == () and tx.checkpoint_write_pointers == ()
    assert tx.type is TransactionType.LONG
    assert tx.visibility_level is VisibilityLevel.SNAPSHOT


def test_unknown_enum_values_map_like_tephra() -> None:
    data = (
        b"\x08\x00\x06" + struct.pack(">i", 99) + b"\x08\x00\x09" + struct.pack(">i", 42) + b"\x00"
    )
    tx = decode_transaction(data)
    assert tx.type is TransactionType.LONG
    assert tx.visibility_level is VisibilityLevel.SNAPSHOT


def test_unknown_fields_and_mistyped_fields_are_skipped() -> None:
    extra = (
        b"\x0b\x00\x63" + struct.pack(">i", 3) + b"abc"  # string field 99
        + b"\x0c\x00\x64" + b"\x08\x00\x01" + struct.pack(">i", 1) + b"\x00"  # struct field 100
        + b"\x0d\x00\x65" + b"\x08\x0b" + struct.pack(">i", 1) + struct.pack(">i", 5)
        + struct.pack(">i", 1) + b"x"  # map<i32,string> field 101
        + b"\x08\x00\x01" + struct.pack(">i", 5)  # field 1 with the wrong type: skipped
    )  # fmt: skip
    data = extra + b"\x0a\x00\x02" + struct.pack(">q", 11) + b"\x00"
    tx = decode_transaction(data)
    assert tx.read_pointer == 11 and tx.transaction_id == 0


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x0a\x00\x01\x00\x00",
        b"\x0f\x00\x03\x0a\x00\x00\x00\x05" + b"\x00" * 8,
        b"\x0f\x00\x03\x0b\x00\x00\x00\x01",
        b"\x0f\x00\x03\x0a\xff\xff\xff\xff\x00",
        b"\x11\x00\x01\x00",
    ],
)
def test_malformed_bytes_raise_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_transaction(data)


ids = st.integers(min_value=-(2**63), max_value=2**63 - 1)
sorted_ids = st.lists(ids, max_size=20).map(lambda xs: tuple(sorted(xs)))

transactions = st.builds(
    Transaction,
    transaction_id=ids,
    read_pointer=ids,
    invalids=sorted_ids,
    in_progress=sorted_ids,
    first_short_in_progress=ids,
    type=st.sampled_from(TransactionType),
    write_pointer=ids,
    checkpoint_write_pointers=sorted_ids,
    visibility_level=st.sampled_from(VisibilityLevel),
)


@given(transactions)
def test_round_trip(tx: Transaction) -> None:
    assert decode_transaction(encode_transaction(tx)) == tx


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_transaction(data)


@given(transactions, st.binary(max_size=8), st.integers(min_value=0, max_value=200))
def test_the_standard_layout_shortcut_agrees_with_the_general_decoder(
    tx: Transaction, noise: bytes, at: int
) -> None:
    data = encode_transaction(tx)
    assert _decode_standard(data) == _decode_fields(data) == tx
    mutated = data[:at] + noise + data[at + len(noise) :]
    shortcut = _decode_standard(mutated)
    if shortcut is not None:  # whatever it accepts, the general decoder reads alike
        assert shortcut == _decode_fields(mutated)
