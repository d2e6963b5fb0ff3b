"""The Arrow codecs of the Spark source: golden bytes, and agreement with the reference
Avro codec (``tms.codec.avro``) on any payloads, ids and bodies, malformed ones too."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tms.codec import avro
from tms.errors import TmsCodecError
from tms.spark.arrow_codec import consume_batch, messages_batch, publish_body

payload_lists = st.lists(st.binary(max_size=300) | st.binary(min_size=8000, max_size=9000))


def test_publish_body_golden_bytes() -> None:
    # union branch 0 and the long 7; a block of 2; "ab" and "c"; the end of the array
    assert publish_body(7, pa.array([b"ab", b"c"], pa.binary())) == bytes.fromhex(
        "000e" + "04" + "046162" + "0263" + "00"
    )
    # no write pointer: union branch 1 (null); an empty array is just its end
    assert publish_body(None, pa.array([], pa.binary())) == bytes.fromhex("0200")


@settings(max_examples=200, deadline=None)
@given(
    wp=st.none() | st.integers(0, 2**63 - 1),
    payloads=payload_lists,
    cut=st.integers(0, 5),
)
def test_publish_body_is_the_reference_encoding(
    wp: int | None, payloads: list[bytes], cut: int
) -> None:
    array = pa.array(payloads, pa.binary()).slice(min(cut, len(payloads)))  # offset arrays
    assert publish_body(wp, array) == avro.encode_publish_request(wp, payloads[cut:])


def test_publish_body_takes_strings_as_utf8_and_refuses_nulls() -> None:
    assert publish_body(1, pa.array(["é"])) == avro.encode_publish_request(1, ["é".encode()])
    with pytest.raises(TmsCodecError):
        publish_body(1, pa.array([b"a", None], pa.binary()))


def _reference(body: bytes, topic: str) -> list[dict[str, object]]:
    return [
        {
            "id": m[0].hex(),
            "publish_time": datetime.fromtimestamp(int.from_bytes(m[0][:8], "big") / 1000, UTC),
            "payload": m[1],
            "topic": topic,
        }
        for m in avro.decode_consume_response(body)
    ]


ids = st.binary(min_size=20, max_size=20).map(lambda b: b"\x00\x00\x01" + b[3:])


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(st.tuples(ids, st.binary(max_size=300)), max_size=50))
def test_consume_batch_agrees_with_the_reference_decoder(
    messages: list[tuple[bytes, bytes]],
) -> None:
    body = b"".join(avro.encode_consume_response(messages, chunk_bytes=500))  # several blocks
    assert consume_batch(body, "t").to_pylist() == _reference(body, "t")


def test_consume_batch_golden_bytes() -> None:
    mid = bytes.fromhex("0000019000000000" + "00" * 12)
    body = bytes.fromhex("02" + "28") + mid + bytes.fromhex("04" + "6869" + "00")
    assert consume_batch(body, "x").to_pylist() == [
        {
            "id": mid.hex(),
            "publish_time": datetime.fromtimestamp(0x190 * 2**32 / 1000, UTC),
            "payload": b"hi",
            "topic": "x",
        }
    ]


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(st.tuples(ids, st.binary(max_size=100)), min_size=1, max_size=5),
    data=st.data(),
)
def test_malformed_bodies_fail_as_the_reference_does(
    messages: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    body = bytearray(b"".join(avro.encode_consume_response(messages)))
    if data.draw(st.booleans()):
        del body[data.draw(st.integers(0, len(body) - 1)) :]  # truncated
    else:
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))  # one byte changed
    try:
        expected = [(m[0], m[1]) for m in avro.decode_consume_response(bytes(body))]
    except TmsCodecError:
        with pytest.raises(TmsCodecError):
            consume_batch(bytes(body), "t")
        return
    if all(len(i) == 20 for i, _ in expected):
        batch = consume_batch(bytes(body), "t")
        columns = zip(batch["id"].to_pylist(), batch["payload"].to_pylist(), strict=True)
        got = [(bytes.fromhex(i), p) for i, p in columns]
        assert got == expected
    else:
        with pytest.raises(TmsCodecError):  # every id of ours is 20 bytes
            consume_batch(bytes(body), "t")


@settings(max_examples=100, deadline=None)
@given(messages=st.lists(st.tuples(ids, st.binary(max_size=300)), max_size=50))
def test_messages_batch_is_consume_batch_of_the_same_messages(
    messages: list[tuple[bytes, bytes]],
) -> None:
    body = b"".join(avro.encode_consume_response(messages))
    assert messages_batch(messages, "t").equals(consume_batch(body, "t"))


def test_messages_batch_refuses_ids_of_another_size() -> None:
    with pytest.raises(TmsCodecError):
        messages_batch([(b"\x00" * 19, b"p")], "t")
