"""Subscription codecs: golden bytes built field by field, round trips, the order of
position rows, positions after messages, and bad input."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.codec import keys
from tms.codec.subscription_bodies import (
    decode_commit_request,
    decode_preferences_update,
    decode_seek_request,
    decode_write_pointers,
)
from tms.codec.subscriptions import (
    decode_data,
    decode_position_key,
    decode_position_value,
    decode_record,
    encode_data,
    encode_position_value,
    encode_record,
    position_key,
    preferences_from_json,
    preferences_to_json,
    subscription_from_key,
    subscription_key,
    topic_subscriptions_prefix,
)
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import (
    EARLIEST,
    PayloadFilter,
    Preferences,
    Start,
    SubscriptionData,
    SubscriptionId,
    SubscriptionState,
    after,
    after_entry,
)

T = TopicId("ns", "t-1")


def test_golden_record() -> None:
    record = SubscriptionData(
        Preferences(Start.at_time(1234), True, PayloadFilter((b"ab",))),
        SubscriptionState(MessageId(5, 6, 7, 8), 2, 99, 1000),
    )
    body = (
        b'{"preferences":{"filter":{"payloadPrefixes":["YWI="]},"start":{"time":1234},'
        b'"transactional":true},"state":{"generation":2,'
        b'"position":"00000000000000050006000000000000000700' + b'08",'
        b'"stamp":99,"updated":1000}}'
    )
    assert encode_record(record, 3) == struct.pack(">q", 3) + body
    decoded = decode_record(struct.pack(">q", 3) + body)
    assert (decoded.data, decoded.version) == (record, 3)
    assert encode_data(record) == body  # the ZooKeeper store's znode data
    assert decode_data(body) == record


def test_golden_keys() -> None:
    sub = SubscriptionId(T, "s_1")
    assert subscription_key(sub) == b"ns:t-1:s_1"
    assert topic_subscriptions_prefix(T) == b"ns:t-1:"
    assert subscription_from_key(b"ns:t-1:s_1") == sub
    prefix = keys.topic_prefix(T, 4)
    key = position_key(prefix, "s_1", 0x0102030405060708)
    assert key == b"ns:t-1:\x00\x00\x00\x04" + b"s_1:" + bytes.fromhex("0102030405060708")
    assert decode_position_key(key, prefix) == ("s_1", 0x0102030405060708)


def test_golden_position_value() -> None:
    value = encode_position_value(7, MessageId(1, 2, 3, 4), 5000)
    assert value == (
        b"\x01" + struct.pack(">q", 7) + struct.pack(">qHqH", 1, 2, 3, 4) + struct.pack(">q", 5000)
    )
    row = decode_position_value(42, value)
    assert (row.write_pointer, row.stamp, row.position, row.written_ms) == (
        42,
        7,
        MessageId(1, 2, 3, 4),
        5000,
    )


ids = st.builds(
    MessageId,
    st.integers(0, 2**62),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**62),
    st.integers(0, 0xFFFF),
)
starts = st.one_of(
    st.just(Start.earliest()),
    st.just(Start.latest()),
    st.builds(Start.at_time, st.integers(0, 2**62)),
    st.builds(Start.at_id, ids),
)
preferences = st.builds(
    Preferences,
    starts,
    st.booleans(),
    st.none()
    | st.builds(
        PayloadFilter,
        st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=4).map(tuple),
    ),
)
states = st.builds(
    SubscriptionState,
    ids,
    st.integers(1, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**62),
)


@given(st.builds(SubscriptionData, preferences, states), st.integers(1, 2**62))
def test_record_round_trip(data: SubscriptionData, version: int) -> None:
    decoded = decode_record(encode_record(data, version))
    assert (decoded.data, decoded.version) == (data, version)


@given(st.builds(SubscriptionData, preferences, states))
def test_record_body_is_the_json_of_preferences_and_state(data: SubscriptionData) -> None:
    # the body is put together from the preferences' cached JSON and the state's: the
    # same bytes as the whole record dumped at once
    whole = {
        "preferences": preferences_to_json(data.preferences),
        "state": {
            "position": data.state.position.hex,
            "generation": data.state.generation,
            "stamp": data.state.stamp,
            "updated": data.state.updated_ms,
        },
    }
    assert encode_data(data) == json.dumps(whole, sort_keys=True, separators=(",", ":")).encode()


@given(preferences)
def test_preferences_json_round_trip(prefs: Preferences) -> None:
    assert preferences_from_json(json.loads(json.dumps(preferences_to_json(prefs)))) == prefs


@given(st.integers(1, 2**63 - 1), st.integers(1, 2**63 - 1))
def test_position_rows_of_a_subscription_sort_by_write_pointer(a: int, b: int) -> None:
    prefix = keys.topic_prefix(T, 1)
    assert (a < b) == (position_key(prefix, "s", a) < position_key(prefix, "s", b))


def test_one_subscriptions_rows_are_never_a_prefix_of_anothers() -> None:
    prefix = keys.topic_prefix(T, 1)
    assert not position_key(prefix, "s-1", 5).startswith(prefix + b"s:")
    assert not position_key(prefix, "s", 5).startswith(prefix + b"s-1:")


@given(ids)
def test_the_position_after_a_message_is_above_it_and_below_the_next_entry(
    message: MessageId,
) -> None:
    nxt = after(message)
    assert nxt > message
    if message.publish_ms < 2**62:
        assert nxt <= after_entry(message.publish_ms, message.seq)


def test_positions_after_entries_and_messages() -> None:
    assert after_entry(5, 0xFFFF) == MessageId(6, 0)
    assert after(MessageId(5, 3)) == MessageId(5, 4)
    assert after(MessageId(5, 3, 9, 0xFFFF)) == MessageId(5, 3, 10, 0)
    assert after(MessageId(5, 3, 9, 1)) == MessageId(5, 3, 9, 2)
    assert EARLIEST == MessageId(0, 0) < MessageId(0, 0, 0, 1)


@pytest.mark.parametrize(
    "value",
    [b"", b"\x00" * 7, struct.pack(">q", 1) + b"{", struct.pack(">q", 1) + b'{"state":{}}'],
)
def test_bad_records_are_codec_errors(value: bytes) -> None:
    with pytest.raises(TmsCodecError):
        decode_record(value)


@pytest.mark.parametrize("value", [b"", b"{", b"[]", b'{"state":{}}', b"\xff"])
def test_bad_znode_data_are_codec_errors(value: bytes) -> None:
    with pytest.raises(TmsCodecError):
        decode_data(value)


def test_bad_position_rows_are_codec_errors() -> None:
    with pytest.raises(TmsCodecError):
        decode_position_value(1, b"\x02" + bytes(44))
    with pytest.raises(TmsCodecError):
        decode_position_key(b"other", keys.topic_prefix(T, 1))


@pytest.mark.parametrize(
    ("decode", "body"),
    [
        (decode_commit_request, {"position": "zz", "version": 1}),
        (decode_commit_request, {"position": "00" * 20, "version": 0}),
        (decode_commit_request, {"position": "00" * 20, "version": True}),
        (decode_commit_request, {"position": "00" * 20, "version": 1, "inTransaction": True}),
        (decode_commit_request, {"position": "00" * 20, "version": 1, "transaction": "!"}),
        (decode_seek_request, {"version": 1}),
        (decode_seek_request, {"to": "soon", "version": 1}),
        (decode_seek_request, {"to": {"time": -1}, "version": 1}),
        (decode_preferences_update, {"preferences": {"start": "x"}, "version": 1}),
        (decode_preferences_update, {"preferences": {"colour": "red"}, "version": 1}),
        (decode_preferences_update, {"preferences": {"transactional": 1}, "version": 1}),
        (
            decode_preferences_update,
            {"preferences": {"filter": {"payloadPrefixes": []}}, "version": 1},
        ),
        (
            decode_preferences_update,
            {"preferences": {"filter": {"payloadPrefixes": ["%"]}}, "version": 1},
        ),
    ],
)
def test_bad_bodies_are_invalid_arguments(decode: object, body: object) -> None:
    with pytest.raises(TmsInvalidArgumentError):
        decode(json.dumps(body).encode())  # type: ignore[operator]


def test_write_pointer_lists() -> None:
    assert decode_write_pointers(b'{"transactionWritePointers": [3, 1, 3]}', "x") == [3, 1]
    for bad in ([], [0], [True], ["1"], list(range(1, 1002))):
        body = json.dumps({"transactionWritePointers": bad}).encode()
        with pytest.raises(TmsInvalidArgumentError):
            decode_write_pointers(body, "x")
