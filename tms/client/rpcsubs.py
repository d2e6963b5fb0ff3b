"""The hot subscription calls of ``MessagingClient`` over the binary protocol
(docs/rpc.md, ops 9-11): ``poll_subscription``, ``commit_subscription`` and
``commit_in_transaction``, with the same arguments, answers and errors as over REST
(``tms.client.subscriptions``, whose other calls — the administration, ``seek``,
``rollback_positions`` — an ``RpcMessagingClient`` makes over REST). A part of
``tms.client.rpc.RpcMessagingClient``; the pure conversions here serve ``tms.aio`` too.

A poll is resent after a lost answer unless it carries a commit; a commit is not (as
over REST: the resend of an applied commit would fail with ``BadVersionError``).
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any, TypeVar

from tms.client.rpccore import Call, make_call, no_answer
from tms.client.subscriptions import SubscriptionBatch, SubscriptionInfo, read_error_of
from tms.codec.subscriptions import preferences_from_json
from tms.errors import TmsCodecError
from tms.ids import MessageId
from tms.rpc.frames import rpc
from tms.rpc.ops import BY_NAME
from tms.rpc.values import messages_of
from tms.subscription import SubscriptionId
from txn.codec import encode_transaction
from txn.transaction import Transaction

__all__ = [
    "SUB_COMMIT",
    "SUB_POLL",
    "SUB_POSITION",
    "RpcSubscriptionCalls",
    "batch_of",
    "commit_call",
    "commit_request",
    "info_of",
    "poll_call",
    "position_call",
    "sub_poll_request",
]

T = TypeVar("T")

SUB_POLL, SUB_COMMIT, SUB_POSITION = (
    BY_NAME["sub_poll"],
    BY_NAME["sub_commit"],
    BY_NAME["sub_position"],
)


def _tx(transaction: Transaction | None) -> bytes | None:
    return None if transaction is None else encode_transaction(transaction)


def sub_poll_request(  # noqa: PLR0917 - MessagingClient.poll_subscription's, in order
    sub: SubscriptionId,
    start: MessageId | None,
    limit: int | None,
    transaction: Transaction | None,
    wait_ms: int,
    commit_version: int | None,
    reread: bool = False,
    commit_later: bool = False,
) -> Any:
    return rpc.SubPollRequest(
        ns=sub.topic.namespace,
        topic=sub.topic.topic,
        name=sub.name,
        start=None if start is None else start.to_bytes(),
        limit=limit,
        transaction=_tx(transaction),
        wait_ms=wait_ms or None,
        commit_version=commit_version,
        reread=reread or None,
        commit_later=commit_later or None,
    )


def _position(value: Any) -> MessageId:
    if not isinstance(value, bytes):
        raise TmsCodecError("an answer without its position")
    return MessageId.from_bytes(value)


def batch_of(response: Any) -> SubscriptionBatch:
    """The ``SubscriptionBatch`` of a ``SubPollResponse`` (``TmsCodecError`` when it is
    not whole)."""
    if response.version is None:
        raise TmsCodecError("a subscription poll's answer without its version")
    return SubscriptionBatch(
        messages_of(response),
        _position(response.start),
        _position(response.position),
        response.version,
        bool(response.held),
        bool(response.held_finished),
        bool(response.fresh),
        read_error_of(response.read_error, response.read_error_message),
        response.durable_version,
    )


def commit_request(
    sub: SubscriptionId, position: MessageId, version: int, transaction: Transaction | None
) -> Any:
    return rpc.SubCommitRequest(
        ns=sub.topic.namespace,
        topic=sub.topic.topic,
        name=sub.name,
        position=position.to_bytes(),
        version=version,
        transaction=_tx(transaction),
    )


def info_of(sub: SubscriptionId, response: Any) -> SubscriptionInfo:
    """The ``SubscriptionInfo`` of a ``SubscriptionState`` (no lag: as over REST, a
    commit's answer does not count it)."""
    try:
        preferences = preferences_from_json(json.loads(response.preferences))
        return SubscriptionInfo(
            sub,
            int(response.version),
            _position(response.position),
            response.committed_by,
            int(response.updated_ms),
            int(response.generation),
            preferences,
            None,
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise TmsCodecError(f"a subscription's state that does not read: {exc}") from exc


def poll_call(  # noqa: PLR0917 - MessagingClient.poll_subscription's, in order
    sub: SubscriptionId,
    start: MessageId | None,
    limit: int | None,
    transaction: Transaction | None,
    wait_ms: int,
    commit_version: int | None,
    reread: bool,
    commit_later: bool = False,
) -> Call[SubscriptionBatch]:
    """A subscription's poll (``tms.client.rpccore.Call``)."""
    request = sub_poll_request(
        sub, start, limit, transaction, wait_ms, commit_version, reread, commit_later
    )
    return make_call(
        SUB_POLL,
        request,
        batch_of,
        sub.topic,
        idempotent=commit_version is None,
        wait_s=wait_ms / 1000,
    )


def commit_call(
    sub: SubscriptionId, position: MessageId, version: int, transaction: Transaction | None
) -> Call[SubscriptionInfo]:
    """A subscription's commit (``tms.client.rpccore.Call``)."""
    request = commit_request(sub, position, version, transaction)
    return make_call(SUB_COMMIT, request, partial(info_of, sub), sub.topic)


def position_call(
    sub: SubscriptionId, position: MessageId, version: int, transaction: Transaction
) -> Call[None]:
    """A subscription's position written in a transaction (``tms.client.rpccore.Call``)."""
    request = commit_request(sub, position, version, transaction)
    return make_call(SUB_POSITION, request, no_answer, sub.topic)


class RpcSubscriptionCalls:
    """See the module docstring."""

    request_timeout_s: float

    def _run(self, call: Call[T]) -> T:
        raise NotImplementedError  # RpcMessagingClient's

    def poll_subscription(
        self,
        sub: SubscriptionId,
        *,
        start: MessageId | None = None,
        limit: int | None = None,
        transaction: Transaction | None = None,
        wait_ms: int = 0,
        commit_version: int | None = None,
        reread: bool = False,
        commit_later: bool = False,
    ) -> SubscriptionBatch:
        """See ``MessagingClient.poll_subscription``."""
        return self._run(
            poll_call(sub, start, limit, transaction, wait_ms, commit_version, reread, commit_later)
        )

    def commit_subscription(
        self,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        *,
        transaction: Transaction | None = None,
    ) -> SubscriptionInfo:
        """Move the position forward to ``position`` (``transaction``: the one the
        messages were read with, required for a transactional subscription)."""
        return self._run(commit_call(sub, position, version, transaction))

    def commit_in_transaction(
        self,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        transaction: Transaction,
    ) -> None:
        """Write ``position`` as part of ``transaction`` (see
        ``SubscriptionCalls.commit_in_transaction``)."""
        self._run(position_call(sub, position, version, transaction))
