"""The subscription calls of ``MessagingClient`` (``tms.http.subscriptions``). A part of
``MessagingClient``; see there for errors and retries.

Reads (``get``, ``list``, ``poll`` without ``commit_version``) and rollbacks are retried
when the service cannot be reached; updates are not: after a lost answer a retry with
the same version would fail with ``BadVersionError`` whether or not the first attempt
took effect, so the caller reads the subscription again instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tms.client.transport import Reply, Requests
from tms.codec import avro
from tms.codec.avro import ConsumeSpec
from tms.codec.subscription_bodies import (
    CommitRequest,
    encode_commit_request,
    encode_seek_request,
    lag_from_json,
)
from tms.codec.subscriptions import preferences_from_json, preferences_to_json, start_to_json
from tms.errors import TmsError, error_for
from tms.ids import MessageId
from tms.model import Message, TopicId
from tms.subscription import Lag, Preferences, Start, SubscriptionId
from txn.codec import encode_transaction
from txn.transaction import Transaction

__all__ = ["SubscriptionBatch", "SubscriptionCalls", "SubscriptionInfo", "read_error_of"]

JSON = "application/json"
AVRO = "avro/binary"


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """A subscription as the service answered (docs/http.md, ``Subscription``)."""

    id: SubscriptionId
    version: int
    position: MessageId
    committed_by: int | None
    updated_ms: int
    generation: int
    preferences: Preferences
    lag: Lag | None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SubscriptionInfo:
        return cls(
            SubscriptionId(TopicId(obj["namespace"], obj["topic"]), obj["name"]),
            int(obj["version"]),
            MessageId.from_hex(obj["position"]),
            obj.get("committedBy"),
            int(obj.get("updated", 0)),
            int(obj.get("generation", 0)),
            preferences_from_json(obj["preferences"]),
            lag_from_json(obj.get("lag")),
        )

    def to_json(self) -> dict[str, Any]:
        """The REST API's ``Subscription`` object."""
        return {
            "namespace": self.id.topic.namespace,
            "topic": self.id.topic.topic,
            "name": self.id.name,
            "version": self.version,
            "position": self.position.hex,
            "committedBy": self.committed_by,
            "updated": self.updated_ms,
            "generation": self.generation,
            "preferences": preferences_to_json(self.preferences),
            "lag": None
            if self.lag is None
            else {"messages": self.lag.messages, "exact": self.lag.exact},
        }


@dataclass(frozen=True, slots=True)
class SubscriptionBatch:
    """What a subscription poll returned: ``start`` is where it read from, ``position``
    where the next read starts
    (commit it once the messages are processed) with ``version``; ``held``: it stopped
    at a transaction the reader cannot see yet (``held_finished``: which has finished
    since: read on with a new transaction); ``fresh``: read (``reread``) with what
    finished since the reader's transaction started — read on, and commit, with a
    transaction started after this answer. ``read_error``: the read failed after the
    commit riding on the poll was written — no messages, ``position`` and ``version``
    are the commit's (poll again, without committing). ``durable_version``: the version
    the service knew durable when it answered (None: ``version``); below ``version``
    when the commit riding on the poll was answered before it was durable
    (``commit_later``): a crash may still lose it, and the next commit from ``version``
    then gets ``BadVersionError``."""

    messages: list[Message]
    start: MessageId
    position: MessageId
    version: int
    held: bool
    held_finished: bool
    fresh: bool = False
    read_error: TmsError | None = None
    durable_version: int | None = None


def read_error_of(code: str | None, message: str | None) -> TmsError | None:
    """The error of a poll's failed read (``SubscriptionBatch.read_error``), or None."""
    if code is None:
        return None
    return error_for(code, message or "the read failed", status=500)


def _int_or_none(text: str | None) -> int | None:
    return None if text is None else int(text)


def _path(sub: SubscriptionId, action: str = "") -> str:
    path = f"/v1/namespaces/{sub.topic.namespace}/topics/{sub.topic.topic}/subscriptions/{sub.name}"
    return f"{path}/{action}" if action else path


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def _tx(transaction: Transaction | None) -> bytes | None:
    return encode_transaction(transaction) if transaction is not None else None


def _change(calls: Requests, method: str, sub: SubscriptionId, action: str, body: bytes) -> Reply:
    """A change to ``sub`` with a JSON body: sent once (not idempotent)."""
    return calls._request(
        method, _path(sub, action), topic=sub.topic, body=body, content_type=JSON, idempotent=False
    )


class SubscriptionCalls:
    def create_subscription(
        self: Requests, sub: SubscriptionId, preferences: Preferences | None = None
    ) -> SubscriptionInfo:
        """Create ``sub`` (``SubscriptionExistsError`` if it exists)."""
        body = _json(preferences_to_json(preferences or Preferences()))
        return SubscriptionInfo.from_json(_change(self, "PUT", sub, "", body).json())

    def get_subscription(self: Requests, sub: SubscriptionId) -> SubscriptionInfo:
        return SubscriptionInfo.from_json(self._request("GET", _path(sub), topic=sub.topic).json())

    def list_subscriptions(self: Requests, topic: TopicId) -> list[SubscriptionInfo]:
        path = f"/v1/namespaces/{topic.namespace}/topics/{topic.topic}/subscriptions"
        return [
            SubscriptionInfo.from_json(o) for o in self._request("GET", path, topic=topic).json()
        ]

    def update_subscription(
        self: Requests, sub: SubscriptionId, preferences: Preferences, version: int
    ) -> SubscriptionInfo:
        """Replace the preferences (``BadVersionError`` if ``version`` is stale)."""
        body = _json({"preferences": preferences_to_json(preferences), "version": version})
        return SubscriptionInfo.from_json(_change(self, "PUT", sub, "preferences", body).json())

    def delete_subscription(self: Requests, sub: SubscriptionId, version: int) -> None:
        self._request(
            "DELETE",
            _path(sub),
            topic=sub.topic,
            params={"version": str(version)},
            idempotent=False,
        )

    def seek_subscription(
        self: Requests,
        sub: SubscriptionId,
        to: Start,
        version: int,
        *,
        transaction: Transaction | None = None,
    ) -> SubscriptionInfo:
        """Move the position to ``to`` (backwards too)."""
        body = encode_seek_request(start_to_json(to), version, _tx(transaction))
        return SubscriptionInfo.from_json(_change(self, "POST", sub, "seek", body).json())

    def commit_subscription(
        self: Requests,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        *,
        transaction: Transaction | None = None,
    ) -> SubscriptionInfo:
        """Move the position forward to ``position`` (``transaction``: the one the
        messages were read with, required for a transactional subscription)."""
        body = encode_commit_request(CommitRequest(position, version, _tx(transaction), False))
        return SubscriptionInfo.from_json(_change(self, "POST", sub, "commit", body).json())

    def commit_in_transaction(
        self: Requests,
        sub: SubscriptionId,
        position: MessageId,
        version: int,
        transaction: Transaction,
    ) -> None:
        """Write ``position`` as part of ``transaction`` (under its write pointer): it
        becomes the subscription's when the transaction commits. Use
        ``tms.client.consumer.SubscriptionConsumer``, which also rolls it back."""
        body = encode_commit_request(CommitRequest(position, version, _tx(transaction), True))
        _change(self, "POST", sub, "commit", body)

    def rollback_positions(
        self: Requests, sub: SubscriptionId, write_pointers: Iterable[int]
    ) -> int:
        """Remove positions written under ``write_pointers`` (idempotent)."""
        body = _json({"transactionWritePointers": list(write_pointers)})
        reply = self._request(
            "POST", _path(sub, "rollback"), topic=sub.topic, body=body, content_type=JSON
        )
        return int(reply.json()["rolledBack"])

    def poll_subscription(
        self: Requests,
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
        """Read from ``start`` (None: the subscription's position as ``transaction``
        sees it); with ``commit_version``, commit ``start`` with that version first
        (``commit_later``: answered before that commit is durable,
        ``SubscriptionBatch.durable_version``);
        ``reread`` (a reader outside a transaction of its own): when the transaction the
        poll is held behind finishes, the service reads again and answers the messages
        (``SubscriptionBatch.fresh``)."""
        spec = ConsumeSpec(start.to_bytes() if start else None, True, limit, _tx(transaction))
        params = {}
        if wait_ms:
            params["wait_ms"] = str(wait_ms)
        if commit_version is not None:
            params["commit"] = str(commit_version)
        if reread:
            params["reread"] = "true"
        if commit_later:
            params["commit_later"] = "true"
        reply = self._request(
            "POST",
            _path(sub, "poll"),
            topic=sub.topic,
            body=avro.encode_consume_request(spec),
            content_type=AVRO,
            params=params or None,
            timeout_s=self.request_timeout_s + wait_ms / 1000,
            idempotent=commit_version is None,
        )
        headers = reply.headers
        return SubscriptionBatch(
            avro.decode_consume_response(reply.content),
            MessageId.from_hex(headers["X-Tms-Start"]),
            MessageId.from_hex(headers["X-Tms-Position"]),
            int(headers["X-Tms-Version"]),
            headers.get("X-Tms-Held") == "true",
            headers.get("X-Tms-Held-Finished") == "true",
            headers.get("X-Tms-Fresh") == "true",
            read_error_of(headers.get("X-Tms-Read-Error"), headers.get("X-Tms-Read-Error-Message")),
            _int_or_none(headers.get("X-Tms-Durable-Version")),
        )

    def transactions_finished(
        self: Requests, topic: TopicId, write_pointers: Sequence[int]
    ) -> None:
        """Tell the service these transactions, which wrote to ``topic``, finished: it
        wakes the readers held behind them at once."""
        path = f"/v1/namespaces/{topic.namespace}/topics/{topic.topic}/finished"
        body = _json({"transactionWritePointers": list(write_pointers)})
        self._request("POST", path, topic=topic, body=body, content_type=JSON)
