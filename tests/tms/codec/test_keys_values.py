"""Key and value codecs: golden bytes, round trips, and key order = consumption order."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.codec import keys
from tms.codec.values import (
    MessageEntry,
    decode_idempotency_value,
    decode_message_value,
    decode_metadata,
    decode_payload_value,
    encode_idempotency_value,
    encode_message_value,
    encode_metadata,
    encode_payload_value,
    negate_message_value,
)
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.ids import MessageId
from tms.model import RollbackDetail, TopicId

T = TopicId("default", "t1")


def test_metadata_key_round_trip_and_golden() -> None:
    assert keys.metadata_key(T) == b"default:t1:"
    assert keys.topic_id_from_metadata_key(keys.metadata_key(T)) == T
    assert keys.namespace_prefix("default") == b"default:"


def test_golden_message_and_payload_keys() -> None:
    prefix = keys.topic_prefix(T, 3)
    assert prefix == b"default:t1:" + b"\x00\x00\x00\x03"
    assert keys.message_key(prefix, 1000, 0xFFFE) == prefix + struct.pack(">qH", 1000, 0xFFFE)
    assert keys.decode_message_key(keys.message_key(prefix, 1000, 0xFFFE)) == (3, 1000, 0xFFFE)
    pkey = keys.payload_key(prefix, 77, 5, 6)
    assert pkey == prefix + struct.pack(">qqH", 77, 5, 6)
    assert keys.decode_payload_key(pkey) == (3, 77, 5, 6)
    assert keys.generation_of(pkey, len(keys.topic_name_prefix(T))) == 3


def test_stop_key_for_prefix() -> None:
    assert keys.stop_key_for_prefix(b"ab") == b"ac"
    assert keys.stop_key_for_prefix(b"a\xff") == b"b"
    assert keys.stop_key_for_prefix(b"\xff\xff") is None


positions = st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 0xFFFF))


@given(positions, positions)
def test_message_key_order_is_consumption_order(a: tuple[int, int], b: tuple[int, int]) -> None:
    prefix = keys.topic_prefix(T, 1)
    assert (a < b) == (keys.message_key(prefix, *a) < keys.message_key(prefix, *b))


ids = st.builds(
    MessageId,
    st.integers(0, 2**63 - 1),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**63 - 1),
    st.integers(0, 0xFFFF),
)


@given(ids, ids)
def test_message_id_order_is_byte_order(a: MessageId, b: MessageId) -> None:
    assert (a < b) == (a.to_bytes() < b.to_bytes())
    assert MessageId.from_hex(a.hex) == a and len(a.to_bytes()) == 20


@given(
    st.tuples(st.integers(1, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 0xFFFF)),
    st.tuples(st.integers(1, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 0xFFFF)),
)
def test_payload_key_order(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    prefix = keys.topic_prefix(T, 1)
    assert (a < b) == (keys.payload_key(prefix, *a) < keys.payload_key(prefix, *b))


def test_names_cannot_collide_across_topics() -> None:
    a = keys.topic_prefix(TopicId("ns", "t"), 1)
    b = keys.topic_name_prefix(TopicId("ns", "t1"))
    assert not b.startswith(keys.topic_name_prefix(TopicId("ns", "t")))
    assert not a.startswith(b)


def test_golden_message_id_hex() -> None:
    mid = MessageId(1, 2, 3, 4)
    assert mid.hex == "0000000000000001000200000000000000030004"
    with pytest.raises(TmsInvalidArgumentError):
        MessageId.from_hex("zz")
    with pytest.raises(TmsInvalidArgumentError):
        MessageId.from_bytes(b"\x00" * 19)
    with pytest.raises(TmsInvalidArgumentError):
        MessageId(0, 0x10000)


@pytest.mark.parametrize(
    ("entry", "encoded"),
    [
        (MessageEntry(None, b"hi"), b"\x00hi"),
        (MessageEntry(7, b"hi"), b"\x01" + struct.pack(">q", 7) + b"hi"),
        (MessageEntry(7, None), b"\x02" + struct.pack(">q", 7)),
        (MessageEntry(-7, None), b"\x02" + struct.pack(">q", -7)),
        (MessageEntry(None, b"", 60), b"\x80" + struct.pack(">i", 60)),
        (MessageEntry(9, b"x", 5), b"\x81" + struct.pack(">iq", 5, 9) + b"x"),
    ],
)
def test_golden_message_values(entry: MessageEntry, encoded: bytes) -> None:
    assert encode_message_value(entry) == encoded
    assert decode_message_value(encoded) == entry


@given(
    st.builds(
        MessageEntry,
        st.none() | st.integers(-(2**63), 2**63 - 1),
        st.none() | st.binary(max_size=30),
        st.none() | st.integers(1, 2**31 - 1),
    ).filter(lambda e: e.tx_write_pointer is not None or e.payload is not None)
)
def test_message_value_round_trip(entry: MessageEntry) -> None:
    assert decode_message_value(encode_message_value(entry)) == entry


def test_negation() -> None:
    value = encode_message_value(MessageEntry(5, b"p", 9))
    negated = negate_message_value(value)
    assert negated is not None and decode_message_value(negated) == MessageEntry(-5, b"p", 9)
    assert negate_message_value(negated) is None
    assert negate_message_value(b"\x00x") is None


@pytest.mark.parametrize("bad", [b"", b"\x05x", b"\x01abc", b"\x02" + b"\x00" * 9, b"\x80\x00"])
def test_bad_message_values(bad: bytes) -> None:
    with pytest.raises(TmsCodecError):
        decode_message_value(bad)


def test_payload_values_and_metadata() -> None:
    assert decode_payload_value(encode_payload_value(b"abc")) == (b"abc", None)
    assert decode_payload_value(encode_payload_value(b"abc", 30)) == (b"abc", 30)
    with pytest.raises(TmsCodecError):
        decode_payload_value(b"\x07")
    assert encode_metadata({"ttl": "5", "generation": "1"}) == b'{"generation":"1","ttl":"5"}'
    assert decode_metadata(b'{"generation":"1","ttl":"5"}') == {"generation": "1", "ttl": "5"}
    with pytest.raises(TmsCodecError):
        decode_metadata(b"[1]")


def test_golden_idempotency_value_and_key() -> None:
    details = (RollbackDetail(7, 1_700_000_000_000, 1, 1_700_000_000_000, 2),)
    encoded = encode_idempotency_value(1_700_000_000_123, details)
    assert encoded == (
        struct.pack(">qi", 1_700_000_000_123, 1)
        + struct.pack(">q", 7)
        + struct.pack(">qH", 1_700_000_000_000, 1)
        + struct.pack(">qH", 1_700_000_000_000, 2)
    )
    assert encoded.hex() == (
        "0000018bcfe5687b0000000100000000000000070000018bcfe5680000010000018bcfe568000002"
    )
    assert decode_idempotency_value(encoded) == (1_700_000_000_123, details)
    assert decode_idempotency_value(encode_idempotency_value(5, ())) == (5, ())
    prefix = keys.topic_prefix(T, 3)
    assert keys.idempotency_key(prefix, "spark:q1:42") == b"default:t1:\x00\x00\x00\x03spark:q1:42"


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"\x00" * 11,
        struct.pack(">qi", 1, 2) + bytes(28),  # says 2 ranges, holds 1
        struct.pack(">qi", 1, 1) + struct.pack(">qqHqH", 0, 5, 0, 5, 0),  # write pointer 0
    ],
)
def test_bad_idempotency_values(bad: bytes) -> None:
    with pytest.raises(TmsCodecError):
        decode_idempotency_value(bad)
