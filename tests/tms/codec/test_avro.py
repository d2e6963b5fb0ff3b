"""The v1 Avro wire format: golden bytes built field by field, round trips, bad input."""

from __future__ import annotations

import io

import pytest
from fastavro import schemaless_reader
from hypothesis import given
from hypothesis import strategies as st

from tms.codec.avro import (
    CONSUME_RESPONSE,
    ConsumeSpec,
    decode_consume_request,
    decode_consume_response,
    decode_publish_request,
    decode_publish_response,
    encode_consume_blocks,
    encode_consume_request,
    encode_consume_response,
    encode_publish_request,
    encode_publish_response,
)
from tms.errors import TmsCodecError
from tms.model import Message, RollbackDetail


def zz(n: int) -> bytes:
    """A zig-zag varint, written out independently of the codec."""
    u = (n << 1) ^ (n >> 63)
    out = b""
    while True:
        if u < 0x80:
            return out + bytes([u])
        out += bytes([(u & 0x7F) | 0x80])
        u >>= 7


def test_golden_publish_request() -> None:
    non_tx = encode_publish_request(None, [b"a", b"bc"])
    assert non_tx == zz(1) + zz(2) + zz(1) + b"a" + zz(2) + b"bc" + zz(0)
    tx = encode_publish_request(1234, [])
    assert tx == zz(0) + zz(1234) + zz(0)
    assert decode_publish_request(non_tx) == (None, [b"a", b"bc"])
    assert decode_publish_request(tx) == (1234, [])


def test_golden_publish_response() -> None:
    detail = RollbackDetail(99, 1000, 3, 1001, 65535)
    data = encode_publish_response(detail)
    assert data == zz(0) + zz(99) + zz(1000) + zz(3) + zz(1001) + zz(65535)
    assert len(data) <= 38  # CDAP sizes its buffer for the largest possible response
    assert decode_publish_response(data) == detail


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (ConsumeSpec(), zz(2) + b"\x01" + zz(1) + zz(1)),
        (
            ConsumeSpec(start_from=b"\x00" * 20, inclusive=False, limit=5),
            zz(0) + zz(20) + b"\x00" * 20 + b"\x00" + zz(0) + zz(5) + zz(1),
        ),
        (
            ConsumeSpec(start_from=1700, limit=10, transaction=b"tx"),
            zz(1) + zz(1700) + b"\x01" + zz(0) + zz(10) + zz(0) + zz(2) + b"tx",
        ),
    ],
)
def test_golden_consume_request(spec: ConsumeSpec, expected: bytes) -> None:
    assert encode_consume_request(spec) == expected
    assert decode_consume_request(expected) == spec


def test_golden_consume_response_blocks() -> None:
    m1 = Message((b"\x01" * 20, b"x"))
    m2 = Message((b"\x02" * 20, b"yz"))
    item1 = zz(20) + m1[0] + zz(1) + b"x"
    item2 = zz(20) + m2[0] + zz(2) + b"yz"
    assert b"".join(encode_consume_response([m1, m2])) == zz(2) + item1 + item2 + zz(0)
    chunks = list(encode_consume_response([m1, m2], chunk_bytes=1))
    assert chunks == [zz(1) + item1, zz(1) + item2, zz(0)]
    assert list(encode_consume_blocks([m1, m2], chunk_bytes=1)) == chunks[:2]
    assert list(encode_consume_response([])) == [b"\x00"]
    assert decode_consume_response(b"".join(chunks)) == [m1, m2]


messages = st.lists(
    st.tuples(st.binary(min_size=20, max_size=20), st.binary(max_size=300)), max_size=20
)


@given(messages, st.integers(1, 500))
def test_consume_response_round_trip(items: list[tuple[bytes, bytes]], chunk: int) -> None:
    msgs = [Message(i) for i in items]
    assert decode_consume_response(b"".join(encode_consume_response(msgs, chunk))) == msgs


def _fastavro_array(blocks: list[list[tuple[bytes, bytes]]], sized: bool) -> bytes:
    """A ConsumeResponse as fastavro writes its blocks (negative counts with a byte size
    when ``sized``, as Avro allows), to check the hand-written decoder against."""
    out = b""
    for block in blocks:
        items = b"".join(zz(len(i)) + i + zz(len(p)) + p for i, p in block)
        out += (zz(-len(block)) + zz(len(items)) if sized else zz(len(block))) + items
    return out + zz(0)


ids_any = st.binary(max_size=80)
blocks = st.lists(st.lists(st.tuples(ids_any, st.binary(max_size=200)), min_size=1, max_size=5))


@given(blocks, st.booleans())
def test_consume_response_decoder_agrees_with_fastavro(
    blocks_: list[list[tuple[bytes, bytes]]], sized: bool
) -> None:
    data = _fastavro_array(blocks_, sized)
    reference = schemaless_reader(io.BytesIO(data), CONSUME_RESPONSE)
    decoded = decode_consume_response(data)
    assert decoded == [Message((r["id"], r["payload"])) for r in reference]
    assert decoded == [Message(i) for block in blocks_ for i in block]


@pytest.mark.parametrize(
    "data",
    [
        b"",  # nothing
        zz(1) + zz(20) + b"\x01" * 20,  # payload missing
        zz(1) + zz(20) + b"\x01" * 19,  # id cut short
        zz(1) + zz(-3) + b"abc",  # negative id length
        zz(1) + zz(2) + b"ab" + zz(-1),  # negative payload length
        zz(1) + zz(2) + b"ab" + zz(0),  # array not closed
        zz(0) + b"x",  # trailing bytes
        b"\xff" * 12,  # varint too long
    ],
)
def test_consume_response_malformed(data: bytes) -> None:
    with pytest.raises(TmsCodecError):
        decode_consume_response(data)


@given(st.none() | st.integers(-(2**63), 2**63 - 1), st.lists(st.binary(max_size=50), max_size=10))
def test_publish_request_round_trip(wp: int | None, payloads: list[bytes]) -> None:
    assert decode_publish_request(encode_publish_request(wp, payloads)) == (wp, payloads)


@pytest.mark.parametrize("bad", [b"", b"\x05", b"\x02\x02\x04a", b"\x02\x00\x00extra"])
def test_malformed_requests(bad: bytes) -> None:
    with pytest.raises(TmsCodecError):
        decode_publish_request(bad)


def test_rollback_token_needs_a_pointer() -> None:
    with pytest.raises(TmsCodecError):
        decode_publish_response(zz(1) + zz(1) + zz(1) + zz(1) + zz(1))
