"""``MessagingClient``: the REST API from Python.

Every method maps the service's JSON error body back to the ``tms`` error class with that
code (``error_from_response``), and a connection failure to ``ServiceUnavailableError``
after retrying idempotent calls. Message payloads are ``bytes``; ``str`` is sent as
UTF-8. Times are milliseconds since the epoch.

``follow`` iterates a topic forever with long-poll, resuming after the last message it
yielded and reconnecting with backoff when the service is unavailable; with a transaction
client it reads with a transaction no older than ``tx_refresh_s``, replaced at once when a
read stopped at an entry that transaction cannot see.

**A cluster** (``base_url`` names several instances): an unreachable instance is left
for the next (a write only if it was never sent, or is idempotent); a write answered
``307`` (not the topic's owner) or ``fenced`` (its owner was just deposed: nothing
stored) is sent again, to the owner named, who is remembered (``tms.client.instances``).

Requests go through ``tms.client.transport.Transport`` (urllib3, the engine under
``requests``, called directly: a third of the CPU per request), which reads the
environment's proxy settings once, as ``requests`` would, when the client is made;
``.netrc`` is not consulted: the service authenticates with bearer tokens. An ``https://``
service's certificate is verified against ``ca_bundle`` (else ``REQUESTS_CA_BUNDLE`` /
``CURL_CA_BUNDLE``, else the system's trust store).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tms.client.instances import Instances, parse_urls
from tms.client.observe import ObserveCalls
from tms.client.routing import Routed, error_from_response
from tms.client.subscriptions import SubscriptionCalls
from tms.client.transport import HttpTransport
from tms.codec import avro
from tms.codec import json as jsonc
from tms.codec.avro import ConsumeSpec
from tms.errors import (
    ServiceUnavailableError,
)
from tms.ids import MessageId
from tms.model import Message, RollbackDetail, TopicBounds, TopicId
from txms_common.retry import backoff
from txn.codec import encode_transaction
from txn.transaction import Transaction

if TYPE_CHECKING:
    from tms.client.queue import Queue

__all__ = [
    "MarkersOutcome",
    "MessagingClient",
    "PollResult",
    "RollbackToken",
    "error_from_response",
]

AVRO = "avro/binary"
JSON = "application/json"


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


@dataclass(frozen=True, slots=True)
class RollbackToken:
    """What a transactional publish returns: the exact bytes to send back to rollback,
    and what they say."""

    raw: bytes
    detail: RollbackDetail


@dataclass(frozen=True, slots=True)
class MarkersOutcome:
    """What ``publish_markers`` returns: a rollback token per marker, in request order;
    ``duplicate``: an earlier request with the same idempotency key published them."""

    tokens: list[RollbackToken]
    duplicate: bool


def _start_from(start: MessageId | bytes | str | int | None) -> bytes | int | None:
    if isinstance(start, MessageId):
        return start.to_bytes()
    if isinstance(start, str):
        return bytes.fromhex(start)
    return start


@dataclass(frozen=True, slots=True)
class PollResult:
    """``held``: the read stopped at an entry of a transaction the reader cannot see;
    ``held_finished``: that transaction has finished since (read on with a new one)."""

    messages: list[Message]
    held: bool
    held_finished: bool = False


class _TxSource(Protocol):
    def start_short(self, timeout_s: int | None = None) -> Transaction: ...

    def abort(self, tx: Transaction) -> None: ...


class MessagingClient(Routed, ObserveCalls, SubscriptionCalls):
    """See the module docstring. Thread-safe (connections are pooled per client).

    ``MessagingClient("tms://host:port")`` (or ``tmss://`` for TLS) makes a
    ``tms.client.rpc.RpcMessagingClient``: the same methods over the binary protocol
    (docs/rpc.md)."""

    def __new__(cls, base_url: str | Sequence[str], *args: Any, **kwargs: Any) -> MessagingClient:
        if (
            cls is MessagingClient
            and isinstance(base_url, str)
            and base_url.startswith(("tms://", "tmss://"))
        ):
            from tms.client.rpc import RpcMessagingClient  # noqa: PLC0415 - import cycle

            return super().__new__(RpcMessagingClient)
        return super().__new__(cls)

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        ca_bundle: str | os.PathLike[str] | None = None,
        transport: HttpTransport | Mapping[str, HttpTransport] | None = None,
    ) -> None:
        """``base_url``: one instance, or several (a list, or separated by commas);
        ``transport``: what sends the requests to the first of them, or a transport
        per URL (default: a ``Transport`` per URL, verifying HTTPS against
        ``ca_bundle``)."""
        self.urls = parse_urls(base_url)
        self.base_url = self.urls[0]
        self._timeout = timeout_s
        self._retries = retries
        self._backoff = backoff_s
        self._sleep = sleep
        self._monotonic = monotonic
        self._headers = {"User-Agent": "txms-client", "Accept-Encoding": "identity"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.instances = Instances(self.urls, transport=transport, ca_bundle=ca_bundle)

    @property
    def request_timeout_s(self) -> float:
        """How long a request may take (a long poll: this plus its wait)."""
        return self._timeout

    def close(self) -> None:
        self.instances.close()

    def __enter__(self) -> MessagingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------

    @staticmethod
    def _url(topic: TopicId | None, namespace: str | None = None, action: str = "") -> str:
        """The path of a topic's (or a namespace's topics') resource."""
        if topic is None:
            return f"/v1/namespaces/{namespace}/topics"
        url = f"/v1/namespaces/{topic.namespace}/topics/{topic.topic}"
        return f"{url}/{action}" if action else url

    # -- topics -------------------------------------------------------------------------

    def create_topic(self, topic: TopicId, properties: Mapping[str, str] | None = None) -> None:
        self._request(
            "PUT",
            self._url(topic),
            topic=topic,
            body=_json(dict(properties or {})),
            content_type=JSON,
            idempotent=False,
        )

    def update_topic(self, topic: TopicId, properties: Mapping[str, str]) -> None:
        self._request(
            "PUT",
            self._url(topic, action="properties"),
            topic=topic,
            body=_json(dict(properties)),
            content_type=JSON,
        )

    def get_topic(self, topic: TopicId) -> dict[str, str]:
        result: dict[str, str] = self._request("GET", self._url(topic), topic=topic).json()
        return result

    def list_topics(self, namespace: str) -> list[str]:
        result: list[str] = self._request("GET", self._url(None, namespace)).json()
        return result

    def delete_topic(self, topic: TopicId) -> None:
        self._request("DELETE", self._url(topic), topic=topic, idempotent=False)

    def queue(self, topic: TopicId) -> Queue:
        """The queue ``topic`` (a topic created with ``{"kind": "queue"}``)."""
        from tms.client.queue import Queue  # noqa: PLC0415 (it builds on this module)

        return Queue(self, topic)

    # -- writing ------------------------------------------------------------------------

    @staticmethod
    def _payloads(payloads: Iterable[bytes | str]) -> list[bytes]:
        return [p.encode() if isinstance(p, str) else bytes(p) for p in payloads]

    def publish(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int | None = None,
        ttls: Iterable[int | None] | None = None,
    ) -> RollbackToken | None:
        """Publish; a rollback token for a transactional publish. Not retried (a retry
        after a lost answer would publish twice), except a commit marker, which the
        service publishes only once per write pointer."""
        data = self._payloads(payloads)
        marker = tx_write_pointer is not None and not data
        if ttls is not None:
            body = jsonc.encode_publish_request(tx_write_pointer, data, ttls)
            response = self._request(
                "POST",
                self._url(topic, action="publish"),
                topic=topic,
                body=body,
                content_type=JSON,
                idempotent=marker,
            )
            if tx_write_pointer is None:
                return None
            detail = jsonc.decode_publish_response(response.content)
            return RollbackToken(avro.encode_publish_response(detail), detail)
        body = avro.encode_publish_request(tx_write_pointer, data)
        response = self._request(
            "POST",
            self._url(topic, action="publish"),
            topic=topic,
            body=body,
            content_type=AVRO,
            idempotent=marker,
        )
        if not response.content:
            return None
        return RollbackToken(response.content, avro.decode_publish_response(response.content))

    def store(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int,
        ttls: Iterable[int | None] | None = None,
    ) -> None:
        """Stage payloads under a write pointer (made visible by a later commit marker);
        ``ttls``: a TTL in seconds (or None) per payload."""
        data = self._payloads(payloads)
        if ttls is None:
            self.store_encoded(topic, avro.encode_publish_request(tx_write_pointer, data))
            return
        self._request(
            "POST",
            self._url(topic, action="store"),
            topic=topic,
            body=jsonc.encode_publish_request(tx_write_pointer, data, ttls),
            content_type=JSON,
            idempotent=False,
        )

    def store_encoded(self, topic: TopicId, request: bytes) -> None:
        """``store`` with the request already encoded: an Avro ``PublishRequest`` that
        names the write pointer (for callers that encode in bulk, like the Spark source)."""
        self._request(
            "POST",
            self._url(topic, action="store"),
            topic=topic,
            body=request,
            content_type=AVRO,
            idempotent=False,
        )

    def rollback(self, topic: TopicId, token: RollbackToken) -> None:
        """Roll back a transactional publish (idempotent)."""
        self._request(
            "POST",
            self._url(topic, action="rollback"),
            topic=topic,
            body=token.raw,
            content_type=AVRO,
        )

    def publish_markers(
        self,
        topic: TopicId,
        write_pointers: Iterable[int],
        *,
        idempotency_key: str | None = None,
    ) -> MarkersOutcome:
        """Commit markers for several write pointers at once: all or none, next to each
        other, in order (``tms.model.MarkersRequest``). Retried: markers are published
        once per write pointer, and a keyed request once per key."""
        pointers = list(write_pointers)
        response = self._request(
            "POST",
            self._url(topic, action="markers"),
            topic=topic,
            body=jsonc.encode_markers_request(pointers, idempotency_key),
            content_type=JSON,
        )
        result = jsonc.decode_markers_response(response.content)
        tokens = [RollbackToken(avro.encode_publish_response(d), d) for d in result.details]
        return MarkersOutcome(tokens, result.duplicate)

    # -- reading ------------------------------------------------------------------------

    def bounds(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        transaction: Transaction | None = None,
        limit: int | None = None,
    ) -> TopicBounds:
        """Where a read from ``start`` would start and stop (``tms.model.TopicBounds``),
        without reading payloads; with ``limit``, where a read of that many messages
        would stop, and how many it would return."""
        spec = ConsumeSpec(
            _start_from(start),
            inclusive,
            limit,
            encode_transaction(transaction) if transaction is not None else None,
        )
        response = self._request(
            "POST",
            self._url(topic, action="bounds"),
            topic=topic,
            body=avro.encode_consume_request(spec),
            content_type=AVRO,
        )
        return jsonc.decode_bounds(response.content)

    def poll(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        limit: int | None = None,
        transaction: Transaction | None = None,
        wait_ms: int = 0,
    ) -> PollResult:
        """Read up to ``limit`` messages from ``start`` (an id, its bytes or hex, a time in
        ms, or None for the oldest); with ``wait_ms``, wait that long for new ones."""
        body, held, finished = self.poll_encoded(
            topic,
            start=start,
            inclusive=inclusive,
            limit=limit,
            transaction=transaction,
            wait_ms=wait_ms,
        )
        return PollResult(avro.decode_consume_response(body), held, finished)

    def poll_encoded(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        limit: int | None = None,
        transaction: Transaction | None = None,
        wait_ms: int = 0,
    ) -> tuple[bytes, bool, bool]:
        """``poll``, the messages left encoded: (the Avro ``ConsumeResponse``, held,
        held_finished), for callers that decode in bulk."""
        spec = ConsumeSpec(
            _start_from(start),
            inclusive,
            limit,
            encode_transaction(transaction) if transaction is not None else None,
        )
        response = self._request(
            "POST",
            self._url(topic, action="poll"),
            topic=topic,
            body=avro.encode_consume_request(spec),
            content_type=AVRO,
            params={"wait_ms": str(wait_ms)} if wait_ms else None,
            timeout_s=self._timeout + wait_ms / 1000,
        )
        return (
            response.content,
            response.headers.get("X-Tms-Held") == "true",
            response.headers.get("X-Tms-Held-Finished") == "true",
        )

    def inspect(
        self, topic: TopicId, *, start_ms: int = 0, end_ms: int | None = None, limit: int = 1000
    ) -> dict[str, Any]:
        """Raw rows of the topic's tables (the table debugger; needs admin permission)."""
        params = {"start_ms": str(start_ms), "limit": str(limit)}
        if end_ms is not None:
            params["end_ms"] = str(end_ms)
        report: dict[str, Any] = self._request(
            "GET", self._url(topic, action="inspect"), topic=topic, params=params
        ).json()
        return report

    def follow(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        tx_client: _TxSource | None = None,
        batch: int = 1000,
        wait_ms: int = 10_000,
        tx_refresh_s: float = 1.0,
        stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[Message]:
        """Every message from ``start`` on, waiting for new ones; ends when ``stop()``.

        With ``tx_client``, reads are transactional: a transaction is used for reads for
        at most ``tx_refresh_s`` and replaced at once when a read stopped at an entry it
        cannot see (which may have committed after it started), so following costs no
        transaction per read. Each transaction is aborted when replaced (it wrote nothing).
        """
        position = start
        first = inclusive
        reconnect = backoff(self._backoff, 4.0, cap_s=10.0)
        held = backoff(0.01, 2.0, cap_s=1.0)
        tx: Transaction | None = None
        tx_started = 0.0
        try:
            while not stop():
                fresh = False
                if tx_client is not None and (
                    tx is None or self._monotonic() - tx_started >= tx_refresh_s
                ):
                    if tx is not None:
                        tx_client.abort(tx)
                        tx = None
                    tx, tx_started, fresh = tx_client.start_short(), self._monotonic(), True
                try:
                    result = self.poll(
                        topic,
                        start=position,
                        inclusive=first,
                        limit=batch,
                        transaction=tx,
                        wait_ms=wait_ms,
                    )
                except ServiceUnavailableError:
                    self._sleep(next(reconnect))
                    continue
                reconnect = backoff(self._backoff, 4.0, cap_s=10.0)
                yield from result.messages
                if result.held:
                    # An entry this transaction cannot see is in the way: read on with a
                    # new transaction; if this one was new and got nowhere (and the
                    # service did not say the entry's transaction finished meanwhile),
                    # wait a little first (not spinning, not skipping the entry).
                    tx_started = -float("inf")
                    if fresh and not result.messages and not result.held_finished:
                        self._sleep(next(held))
                if result.messages:
                    position, first = result.messages[-1][0], False
                    held = backoff(0.01, 2.0, cap_s=1.0)
        finally:
            if tx is not None and tx_client is not None:
                with contextlib.suppress(Exception):
                    tx_client.abort(tx)
