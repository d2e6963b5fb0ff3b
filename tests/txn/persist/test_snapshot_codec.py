"""Snapshot codec: varints, golden bytes, versions 1-4, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.txn.persist.strategies import snapshots
from txn.errors import CodecError
from txn.persist.snapshot_codec import (
    decode_snapshot,
    decode_visibility_state,
    encode_snapshot,
    read_varint,
    write_varint,
)
from txn.state import InProgressTx, InProgressType, TransactionSnapshot, resolve_legacy_types


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (1, "02"), (-1, "01"), (4, "08"), (1_000_000, "80897a"), (-64, "7f"), (64, "8001")],
)
def test_varint_examples(value: int, encoded: str) -> None:
    out = bytearray()
    write_varint(out, value)
    assert out.hex() == encoded
    assert read_varint(bytes(out), 0) == (value, len(out))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(value: int) -> None:
    out = bytearray()
    write_varint(out, value)
    assert read_varint(bytes(out), 0) == (value, len(out))


def simple_snapshot() -> TransactionSnapshot:
    return TransactionSnapshot(
        timestamp_ms=1,
        read_pointer=2,
        write_pointer=3,
        invalid=(4,),
        in_progress={5: InProgressTx(1, 2, InProgressType.LONG, (6,))},
        committing={7: frozenset({b"k"})},
        committed={},
    )


def test_golden_v4() -> None:
    expected = bytes.fromhex(
        "08"  # version 4
        "02" "04" "06"  # timestamp 1, read pointer 2, write pointer 3
        "02" "08" "00"  # invalid: [4]
        "02" "0a" "04" "02" "02" "02" "0c" "00" "00"  # in progress: 5 -> (exp 2, vub 1, LONG, [6])
        "02" "0e" "02" "02" "6b" "00" "00"  # committing: 7 -> {b"k"}
        "00"  # committed: empty
    )  # fmt: skip
    assert encode_snapshot(simple_snapshot()) == expected
    assert decode_snapshot(expected) == simple_snapshot()


def test_version_1_has_no_types_and_they_are_resolved() -> None:
    long_wp = 1_700_000_000_000 * 1_000_000
    data = bytes.fromhex("0202040600")  # v1, ts 1, rp 2, wp 3, no invalids
    body = bytearray()
    write_varint(body, 2)  # two in-progress entries
    for wp, expiration in ((long_wp, -1), (long_wp + 1, 1_700_000_030_000)):
        write_varint(body, wp)
        write_varint(body, expiration)
        write_varint(body, 0)
    body += b"\x00\x00\x00"  # end of in-progress, no committing, no committed
    snap = decode_snapshot(data + bytes(body))
    assert [e.type for e in snap.in_progress.values()] == [None, None]
    resolved = resolve_legacy_types(snap.in_progress, long_timeout_s=86_400)
    assert resolved[long_wp].type is InProgressType.LONG
    assert resolved[long_wp].expiration_ms == 1_700_000_000_000 + 86_400_000
    assert resolved[long_wp + 1].type is InProgressType.SHORT


@pytest.mark.parametrize("version", [2, 3])
def test_versions_2_and_3_share_a_layout(version: int) -> None:
    v4 = encode_snapshot(simple_snapshot())
    # The same state in the v2/v3 layout: no checkpoint block after the type.
    older = bytes([version * 2]) + v4[1:].replace(bytes.fromhex("02020c00"), bytes.fromhex("02"), 1)
    snap = decode_snapshot(older)
    assert snap.in_progress[5] == InProgressTx(1, 2, InProgressType.LONG, ())


@given(snapshots)
def test_round_trip(snapshot: TransactionSnapshot) -> None:
    data = encode_snapshot(snapshot)
    assert decode_snapshot(data) == snapshot
    assert encode_snapshot(decode_snapshot(data)) == data


def test_visibility_state_survives_a_damaged_tail() -> None:
    data = bytearray(encode_snapshot(simple_snapshot()))
    data[-1] = 0x7F  # the committed block no longer ends
    with pytest.raises(CodecError):
        decode_snapshot(bytes(data))
    vis = decode_visibility_state(bytes(data))
    assert vis.invalid == (4,) and list(vis.in_progress) == [5]


@pytest.mark.parametrize("data", [b"", b"\x0a", b"\x08\x02", b"\x08" + b"\xff" * 11])
def test_bad_bytes(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_snapshot(data)
