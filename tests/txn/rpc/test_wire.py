"""The hand-written codecs of the hot calls (``txn.rpc.wire``) against thriftpy2's
generic codec, on both sides: same values decoded, same bytes encoded, None (never an
exception) for anything but the standard layout."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from thriftpy2.thrift import TApplicationException, TMessageType

from tests.txn.test_codec import transactions
from txn.rpc import wire
from txn.rpc.convert import to_thrift
from txn.rpc.idl import tephra
from txn.transaction import Transaction

S = tephra.TTransactionServer
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ids = st.lists(st.integers(0, 2**63 - 1), max_size=6).map(tuple)


def call_frame(api: str, args: Any, seqid: int = 9) -> bytes:
    """A call as thriftpy2 writes it (the frame body, without its length)."""
    return wire.encode_call(api, args, seqid)[4:]


def parsed(frame: bytes, api: str) -> tuple[bytes, int]:
    call = wire.parse_call(frame)
    assert call is not None
    name, seqid, pos = call
    assert name == api.encode()
    return seqid, pos


@given(st.text(max_size=40), i32)
def test_start_arguments_decode_as_written(client_id: str, timeout: int) -> None:
    frame = call_frame("startShortClientId", S.startShortClientId_args(clientId=client_id))
    assert wire.client_id_args(frame, parsed(frame, "startShortClientId")[1]) == client_id

    frame = call_frame("startShortWithTimeout", S.startShortWithTimeout_args(timeout=timeout))
    assert wire.timeout_args(frame, parsed(frame, "startShortWithTimeout")[1]) == timeout

    api = "startShortWithClientIdAndTimeOut"
    frame = call_frame(
        api, S.startShortWithClientIdAndTimeOut_args(clientId=client_id, timeout=timeout)
    )
    assert wire.client_id_timeout_args(frame, parsed(frame, api)[1]) == (client_id, timeout)

    frame = call_frame("startShort", S.startShort_args())
    assert wire.no_args(frame, parsed(frame, "startShort")[1])


@given(i64, st.sets(st.binary(max_size=24), max_size=8), i64)
def test_commit_arguments_decode_as_written(tx: int, changes: set[bytes], wp: int) -> None:
    frame = call_frame("canCommitOrThrow", S.canCommitOrThrow_args(tx=tx, changes=changes))
    decoded = wire.can_commit_args(frame, parsed(frame, "canCommitOrThrow")[1])
    assert decoded is not None
    assert decoded[0] == tx
    assert sorted(decoded[1]) == sorted(changes)

    frame = call_frame("commitOrThrow", S.commitOrThrow_args(txId=tx, wp=wp))
    assert wire.commit_args(frame, parsed(frame, "commitOrThrow")[1]) == (tx, wp)


def test_seqid_bytes_and_argument_offset() -> None:
    frame = call_frame("commitOrThrow", S.commitOrThrow_args(txId=1, wp=2), seqid=-2)
    assert wire.parse_call(frame) == (b"commitOrThrow", struct.pack(">i", -2), 8 + 13 + 4)


def _truncations(frame: bytes) -> list[bytes]:
    return [frame[:n] for n in range(len(frame))]


def test_anything_but_the_standard_layout_is_left_to_the_generic_decoder() -> None:
    cases = {
        "commit": (wire.commit_args, S.commitOrThrow_args(txId=5, wp=6), "commitOrThrow"),
        "can_commit": (
            wire.can_commit_args,
            S.canCommitOrThrow_args(tx=5, changes={b"a", b"bc"}),
            "canCommitOrThrow",
        ),
        "client_id": (
            wire.client_id_args,
            S.startShortClientId_args(clientId="me"),
            "startShortClientId",
        ),
        "timeout": (
            wire.timeout_args,
            S.startShortWithTimeout_args(timeout=3),
            "startShortWithTimeout",
        ),
        "client_id_timeout": (
            wire.client_id_timeout_args,
            S.startShortWithClientIdAndTimeOut_args(clientId="me", timeout=3),
            "startShortWithClientIdAndTimeOut",
        ),
    }
    for name, (decode, args, api) in cases.items():
        frame = call_frame(api, args)
        pos = parsed(frame, api)[1]
        assert decode(frame, pos) is not None, name
        for cut in _truncations(frame)[pos:]:
            assert decode(cut, pos) is None, (name, cut)
        assert decode(frame + b"\x00", pos) is None, name  # trailing bytes
        assert decode(frame[:-1] + b"\x08\x00\x07\x00\x00\x00\x01\x00", pos) is None, name
        missing = call_frame(api, type(args)())  # every field null
        assert decode(missing, parsed(missing, api)[1]) is None, name

    # fields in another order (valid Thrift, not the standard layout)
    reordered = b"\x0a\x00\x02" + struct.pack(">q", 6) + b"\x0a\x00\x01" + struct.pack(">q", 5)
    assert wire.commit_args(reordered + b"\x00", 0) is None
    # a string that is not UTF-8, and a negative length
    assert wire.client_id_args(b"\x0b\x00\x01\x00\x00\x00\x01\xff\x00", 0) is None
    assert wire.client_id_args(b"\x0b\x00\x01\xff\xff\xff\xff\x00", 0) is None
    # a set claiming more elements than there are bytes, or elements of another type
    huge = (
        b"\x0a\x00\x01" + struct.pack(">q", 5) + b"\x0e\x00\x02\x0b" + struct.pack(">i", 2**31 - 1)
    )
    assert wire.can_commit_args(huge + b"\x00", 0) is None
    assert (
        wire.can_commit_args(b"\x0a\x00\x01" + bytes(8) + b"\x0e\x00\x02\x08" + bytes(5), 0) is None
    )
    # not a call: a reply, a oneway, an old-style header
    assert wire.parse_call(b"\x80\x01\x00\x02" + bytes(12)) is None
    assert wire.parse_call(b"\x80\x01\x00\x04" + bytes(12)) is None
    assert wire.parse_call(struct.pack(">i", 6) + b"status\x01" + bytes(5)) is None
    assert wire.parse_call(b"\x80\x01\x00\x01" + struct.pack(">i", 2**31 - 1) + bytes(8)) is None


@given(st.binary(max_size=60))
def test_the_decoders_never_raise(data: bytes) -> None:
    for decode in (
        wire.client_id_args,
        wire.timeout_args,
        wire.client_id_timeout_args,
        wire.can_commit_args,
        wire.commit_args,
        wire.no_args,
    ):
        decode(data, 0)
    wire.parse_call(data)


@given(transactions, i32)
def test_replies_are_the_generic_encoders_bytes(tx: Transaction, seqid: int) -> None:
    seq = struct.pack(">i", seqid)
    for api in ("startShortClientId", "startShort", "startLong"):
        generic = wire.encode_message(
            api, seqid, getattr(S, api + "_result")(success=to_thrift(tx))
        )
        assert wire.transaction_reply(wire.reply_head(api.encode()), seq, tx) == generic
    for api in ("canCommitOrThrow", "commitOrThrow"):
        generic = wire.encode_message(api, seqid, getattr(S, api + "_result")())
        assert wire.void_reply(wire.reply_head(api.encode()), seq) == generic


def test_golden_void_reply() -> None:
    reply = wire.void_reply(wire.reply_head(b"commitOrThrow"), b"\x00\x00\x00\x07")
    assert reply.hex() == "0000001a800100020000000d" + b"commitOrThrow".hex() + "0000000700"


def generic_args(frame: bytes, api: str) -> Any:
    """The argument struct of a framed call, as thriftpy2 decodes it."""
    proto = wire.reading(frame[4:])
    name, mtype, _seqid = proto.read_message_begin()
    assert (name, mtype) == (api, TMessageType.CALL)
    args = getattr(S, api + "_args")()
    proto.read_struct(args)
    return args


@given(st.text(max_size=40), i32, i64, st.sets(st.binary(max_size=24), max_size=8), i64)
def test_client_calls_decode_generically_as_meant(
    client_id: str, timeout: int, tx: int, changes: set[bytes], wp: int
) -> None:
    api = "startShortClientId"
    frame = wire.call_frame(api.encode(), wire.encode_client_id_args(client_id))
    assert frame == wire.encode_call(api, S.startShortClientId_args(clientId=client_id))
    api = "startShortWithClientIdAndTimeOut"
    frame = wire.call_frame(api.encode(), wire.encode_client_id_timeout_args(client_id, timeout))
    args = generic_args(frame, api)
    assert (args.clientId, args.timeout) == (client_id, timeout)
    frame = wire.call_frame(b"canCommitOrThrow", wire.encode_can_commit_args(tx, list(changes)))
    args = generic_args(frame, "canCommitOrThrow")
    assert (args.tx, set(args.changes)) == (tx, changes)
    frame = wire.call_frame(b"commitOrThrow", wire.encode_commit_args(tx, wp))
    assert frame == wire.encode_call("commitOrThrow", S.commitOrThrow_args(txId=tx, wp=wp))


@given(transactions, i32)
def test_client_reads_successful_replies_as_the_generic_decoder(
    tx: Transaction, seqid: int
) -> None:
    seq = struct.pack(">i", seqid)
    name = b"startShortClientId"
    body = wire.transaction_reply(wire.reply_head(name), seq, tx)[4:]
    pos = wire.result_offset(body, name)
    assert pos is not None
    assert wire.transaction_result(body, pos) == tx
    generic = wire.decode_reply(body, name.decode(), S.startShortClientId_result())
    assert generic.transactionId == tx.transaction_id
    assert wire.result_offset(body, b"startShort") is None  # another method's reply
    body = wire.void_reply(wire.reply_head(b"commitOrThrow"), seq)[4:]
    pos = wire.result_offset(body, b"commitOrThrow")
    assert pos is not None and wire.is_void_success(body, pos)
    assert wire.decode_reply(body, "commitOrThrow", S.commitOrThrow_result()) is None


def test_client_leaves_every_other_answer_to_the_generic_decoder() -> None:
    conflict = tephra.TTransactionConflictException(transactionId=5, conflictingKey="k")
    body = wire.encode_message("commitOrThrow", 0, S.commitOrThrow_result(c=conflict))[4:]
    pos = wire.result_offset(body, b"commitOrThrow")
    assert pos is not None and not wire.is_void_success(body, pos)
    with pytest.raises(tephra.TTransactionConflictException):
        wire.decode_reply(body, "commitOrThrow", S.commitOrThrow_result())

    error = tephra.TGenericException(message="bad", originalExceptionClass="x")
    body = wire.encode_message("startShortClientId", 0, S.startShortClientId_result(e=error))[4:]
    pos = wire.result_offset(body, b"startShortClientId")
    assert pos is not None and wire.transaction_result(body, pos) is None
    with pytest.raises(tephra.TGenericException):
        wire.decode_reply(body, "startShortClientId", S.startShortClientId_result())

    failure = TApplicationException(TApplicationException.INTERNAL_ERROR, "boom")
    body = wire.encode_message("commitOrThrow", 0, failure)[4:]
    assert wire.result_offset(body, b"commitOrThrow") is None
    with pytest.raises(TApplicationException, match="boom"):
        wire.decode_reply(body, "commitOrThrow", S.commitOrThrow_result())

    empty = wire.encode_message("startShort", 0, S.startShort_result())[4:]
    with pytest.raises(TApplicationException) as missing:
        wire.decode_reply(empty, "startShort", S.startShort_result())
    assert missing.value.type == TApplicationException.MISSING_RESULT
