"""Between the messaging model and the binary protocol's body structs, both ways (pure):
what the server decodes and answers, and what both clients (``tms.client.rpc``,
``tms.aio``) send and read back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tms.codec import avro
from tms.errors import TmsCodecError, TmsInvalidArgumentError
from tms.ids import MessageId
from tms.model import Message, RollbackDetail, TopicBounds, TopicId
from tms.rpc.frames import rpc
from txn.codec import encode_transaction
from txn.transaction import Transaction

__all__ = [
    "bounds_of",
    "messages_of",
    "payloads_of",
    "poll_request",
    "position",
    "publish_request",
    "rollback_detail",
    "rollback_range",
    "start_of",
    "token_of",
]


def rollback_range(detail: RollbackDetail) -> Any:
    return rpc.RollbackRange(
        write_pointer=detail.tx_write_pointer,
        start_ms=detail.start_ms,
        start_seq=detail.start_seq,
        end_ms=detail.end_ms,
        end_seq=detail.end_seq,
    )


def rollback_detail(value: Any) -> RollbackDetail:
    """The ``RollbackDetail`` of a ``RollbackRange`` struct (``TmsInvalidArgumentError``
    when a field is missing or out of range)."""
    if value is None:
        raise TmsInvalidArgumentError("a rollback range is needed")
    fields = (value.write_pointer, value.start_ms, value.start_seq, value.end_ms, value.end_seq)
    if any(not isinstance(f, int) for f in fields):
        raise TmsInvalidArgumentError("a rollback range needs all five fields")
    return RollbackDetail(*fields)


def token_of(value: Any) -> tuple[bytes, RollbackDetail]:
    """A rollback token as the REST API hands it out (its Avro bytes) and what it says,
    so a token from either transport can be rolled back through the other."""
    detail = rollback_detail(value)
    return avro.encode_publish_response(detail), detail


def payloads_of(payloads: Iterable[bytes | str]) -> list[bytes]:
    """Strings as UTF-8; bytes-like objects as bytes (``bytes`` themselves uncopied)."""
    return [
        p.encode() if isinstance(p, str) else p if type(p) is bytes else bytes(p) for p in payloads
    ]


def publish_request(
    topic: TopicId,
    payloads: list[bytes],
    write_pointer: int | None,
    ttls: Iterable[int | None] | None,
) -> Any:
    return rpc.PublishRequest(
        ns=topic.namespace,
        topic=topic.topic,
        write_pointer=write_pointer,
        payloads=payloads,
        ttls=None if ttls is None else [ttl or 0 for ttl in ttls],
    )


def start_of(start: MessageId | bytes | str | int | None) -> tuple[bytes | None, int | None]:
    """A read's start as (message id bytes, time in ms): an id, its bytes or hex, a time,
    or None (the oldest)."""
    if start is None:
        return None, None
    if isinstance(start, MessageId):
        return start.to_bytes(), None
    if isinstance(start, str):
        return bytes.fromhex(start), None
    if isinstance(start, bytes | bytearray | memoryview):
        return bytes(start), None
    return None, start


def poll_request(  # noqa: PLR0917 - the parameters of MessagingClient.poll, in order
    topic: TopicId,
    start: MessageId | bytes | str | int | None,
    inclusive: bool,
    limit: int | None,
    transaction: Transaction | None,
    wait_ms: int = 0,
) -> Any:
    start_id, start_ms = start_of(start)
    return rpc.PollRequest(
        ns=topic.namespace,
        topic=topic.topic,
        start_id=start_id,
        start_ms=start_ms,
        inclusive=inclusive,
        limit=limit,
        transaction=None if transaction is None else encode_transaction(transaction),
        wait_ms=wait_ms or None,
    )


def messages_of(response: Any) -> list[Message]:
    """The messages of a ``PollResponse`` (``TmsCodecError`` when it is not whole)."""
    ids: Sequence[bytes] | None = response.ids
    payloads: Sequence[bytes] | None = response.payloads
    if ids is None or payloads is None or len(ids) != len(payloads) or response.held is None:
        raise TmsCodecError("a poll response without its messages")
    return list(map(Message, zip(ids, payloads, strict=True)))


def position(value: tuple[int, int] | None) -> Any:
    return None if value is None else rpc.Position(publish_ms=value[0], seq=value[1])


def _pair(value: Any) -> tuple[int, int] | None:
    return None if value is None else (value.publish_ms, value.seq)


def bounds_of(response: Any) -> TopicBounds:
    return TopicBounds(_pair(response.first), _pair(response.last), _pair(response.held))
