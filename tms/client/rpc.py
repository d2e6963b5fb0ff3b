"""``RpcMessagingClient``: ``MessagingClient``'s methods over the binary protocol
(docs/rpc.md). ``MessagingClient("tms://host:port")`` makes one (``tmss://`` for TLS;
``tms://h1:p1,h2:p2`` for several addresses of the service).

* Publish, store, rollback, commit markers, poll, bounds, a queue's enqueue, receive
  (long-poll too), ack, nack and settle travel as binary requests; so do a
  subscription's poll and commits (``tms.client.rpcsubs``). ``follow`` is
  ``MessagingClient``'s, over this ``poll``. Topic administration, a queue's stats and
  ``inspect`` stay on the REST API, at the address the server gives in its hello
  answer (or ``http_url``).
* Connections (``tms.client.channel``): up to ``connections``, each shared by the
  threads calling at once (requests pipelined, answers in any order); opened as needed.
* Failures: errors come back as the ``tms`` class of their code. A request that cannot
  reach the server (no connection) is tried again with back-off, a publish included
  (nothing was sent); one whose answer is lost is tried again only when idempotent
  (rollback, markers, poll, bounds, a commit marker), otherwise it raises
  ``ServiceUnavailableError`` saying the outcome is unknown. ``request_timeout`` (the
  server dropped it unprocessed) is retried whatever the operation. An address whose
  connections keep failing is shielded (``tms.rpc.endpoints``): calls fail fast, or use
  the other addresses, until its shield ends.
* A cluster (``tms.client.owners``): a write refused ``not_owner`` goes to the owner
  the error names, whose connections the topic's requests use from then on.
* Timeouts: a call waits ``timeout_s`` for its answer (a poll ``timeout_s + wait_ms``);
  the server drops a request it could not start within half of ``timeout_s``, so the
  caller hears of it in time to try again.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from tms.client import rpccore as core
from tms.client.channel import Channel, ChannelError, ChannelPool
from tms.client.http import MarkersOutcome, MessagingClient, PollResult, RollbackToken
from tms.client.owners import OwnerRoutes
from tms.client.rpccore import AGAIN, Attempts, Call, Pause
from tms.client.rpcsubs import RpcSubscriptionCalls
from tms.client.transport import Reply, Transport
from tms.errors import ServiceUnavailableError, TmsError
from tms.ids import MessageId
from tms.model import TopicBounds, TopicId
from tms.queues import AckOutcome, Enqueued, EnqueueItem, QueueMessage, Receipt
from tms.rpc.endpoints import Endpoints, parse_url
from txn.transaction import Transaction

__all__ = ["RpcMessagingClient", "client_ssl_context", "rest_url"]

T = TypeVar("T")


def client_ssl_context(ca_bundle: str | os.PathLike[str] | None) -> ssl.SSLContext:
    """Verifies the server against ``ca_bundle`` (a PEM file or directory), else
    ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE``, else the system's trust store."""
    trusted = (
        os.fspath(ca_bundle)
        if ca_bundle is not None
        else os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    )
    if trusted and os.path.isdir(trusted):
        return ssl.create_default_context(capath=trusted)
    return ssl.create_default_context(cafile=trusted or None)


def rest_url(url: str, address: tuple[str, int], welcome: Any) -> str:
    """The REST API's URL as the server at ``address`` (of ``url``) announces it."""
    if not welcome.http_port:
        raise TmsError(
            f"{url} does not say where its REST API is: give http_url= for topic administration"
        )
    scheme = "https" if welcome.http_tls else "http"
    host = f"[{address[0]}]" if ":" in address[0] else address[0]
    return f"{scheme}://{host}:{welcome.http_port}"


class _RestOnDemand:
    """``HttpTransport`` to the REST API at ``url()`` (asked on the first request: the
    address the server announces in its hello answer, or the one given)."""

    def __init__(self, url: Callable[[], str], ca_bundle: str | os.PathLike[str] | None) -> None:
        self._url = url
        self._ca_bundle = ca_bundle
        self._rest: Transport | None = None
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout_s: float,
    ) -> Reply:
        with self._lock:
            if self._rest is None:
                self._rest = Transport(self._url(), ca_bundle=self._ca_bundle)
            rest = self._rest
        return rest.request(
            method, path, body=body, headers=headers, params=params, timeout_s=timeout_s
        )

    def close(self) -> None:
        with self._lock:
            if self._rest is not None:
                self._rest.close()


class RpcMessagingClient(RpcSubscriptionCalls, MessagingClient):
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        ca_bundle: str | os.PathLike[str] | None = None,
        connections: int = 4,
        http_url: str | None = None,
        client_id: str | None = None,
        shield_after: int = 3,
        shield_s: float = 1.0,
    ) -> None:
        addresses, tls = parse_url(base_url)
        super().__init__(
            base_url,
            token=token,
            timeout_s=timeout_s,
            retries=retries,
            backoff_s=backoff_s,
            sleep=sleep,
            monotonic=monotonic,
            transport=_RestOnDemand(lambda: http_url or self._announced_url(), ca_bundle),
        )
        self._token = token
        self._client_id = client_id or f"{os.getpid()}@txms-client"
        self._ssl = client_ssl_context(ca_bundle) if tls else None
        self.endpoints = Endpoints(
            addresses, shield_after=shield_after, shield_s=shield_s, monotonic=monotonic
        )
        self._pool = ChannelPool(self.endpoints, self._connect, connections)
        self._routes: OwnerRoutes[ChannelPool] = OwnerRoutes(
            self._pool,
            lambda endpoints: ChannelPool(endpoints, self._connect, connections),
            lambda address: Endpoints(
                [address], shield_after=shield_after, shield_s=shield_s, monotonic=monotonic
            ),
        )

    def _connect(self, address: tuple[str, int]) -> Channel:
        return Channel.open(
            address,
            token=self._token,
            client_id=self._client_id,
            timeout_s=min(self._timeout, 10.0),
            ssl_context=self._ssl,
            monotonic=self._monotonic,
        )

    def close(self) -> None:
        self._routes.close()
        self._pool.close()
        super().close()

    def _announced_url(self) -> str:
        channel = self._channel()
        return rest_url(self.base_url, channel.address, channel.welcome)

    def _channel(self) -> Channel:
        try:
            return self._pool.acquire()
        except ChannelError as exc:
            raise ServiceUnavailableError(str(exc)) from exc

    def ping(self) -> None:
        """A round trip to the service (``ServiceUnavailableError`` without one)."""
        channel = self._channel()
        try:
            channel.ping(self._timeout)
        except ChannelError as exc:
            raise ServiceUnavailableError(f"ping: {exc}") from exc

    # -- calls ----------------------------------------------------------------------------

    def _run(self, call: Call[T]) -> T:
        """Send ``call`` until ``Attempts`` gives its answer (see the module docstring for
        what is retried)."""
        attempts = Attempts(
            call,
            self._routes,
            timeout_s=self._timeout,
            retries=self._retries,
            backoff_s=self._backoff,
        )
        code, body = call.op.code, call.body
        while True:
            pool = attempts.pool()
            channel = None
            try:
                channel = pool.acquire()
                frame = channel.call(
                    code, body, timeout_s=attempts.timeout_s, queue_timeout_ms=attempts.queue_ms
                )
            except (ChannelError, ServiceUnavailableError) as exc:
                if channel is not None and channel.dead:
                    pool.discard(channel)
                step = attempts.failed(pool, channel, exc)
            else:
                step = attempts.answered(frame)
                if step is AGAIN:
                    continue
                if not isinstance(step, Pause):
                    return cast(T, step)
            self._sleep(step.seconds)

    # -- writing --------------------------------------------------------------------------

    def publish(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int | None = None,
        ttls: Iterable[int | None] | None = None,
    ) -> RollbackToken | None:
        return self._run(core.publish(topic, payloads, tx_write_pointer, ttls))

    def store(
        self,
        topic: TopicId,
        payloads: Iterable[bytes | str],
        *,
        tx_write_pointer: int,
        ttls: Iterable[int | None] | None = None,
    ) -> None:
        self._run(core.store(topic, payloads, tx_write_pointer, ttls))

    def rollback(self, topic: TopicId, token: RollbackToken) -> None:
        self._run(core.rollback(topic, token))

    def publish_markers(
        self,
        topic: TopicId,
        write_pointers: Iterable[int],
        *,
        idempotency_key: str | None = None,
    ) -> MarkersOutcome:
        return self._run(core.markers(topic, write_pointers, idempotency_key))

    # -- queues (tms.client.queue.Queue uses these) ----------------------------------------

    def enqueue_queue(
        self, topic: TopicId, items: Sequence[EnqueueItem], tx_write_pointer: int | None
    ) -> list[Enqueued]:
        """A queue's enqueue as one binary request; resent after a lost answer only when
        every message has a key (a repeat is then a duplicate)."""
        return self._run(core.enqueue(topic, items, tx_write_pointer))

    def receive_queue(
        self, topic: TopicId, max_messages: int, lease_ms: int | None, wait_ms: int = 0
    ) -> list[QueueMessage]:
        """A queue's receive as one binary request, waiting up to ``wait_ms``."""
        return self._run(core.receive(topic, max_messages, lease_ms, wait_ms))

    def ack_queue(
        self, topic: TopicId, receipts: list[Receipt], tx_write_pointer: int | None
    ) -> list[AckOutcome]:
        """A queue's ack as one binary request."""
        return self._run(core.ack(topic, receipts, tx_write_pointer))

    def nack_queue(
        self, topic: TopicId, receipts: list[Receipt], delay_ms: int | None
    ) -> list[AckOutcome]:
        """A queue's nack as one binary request."""
        return self._run(core.nack(topic, receipts, delay_ms))

    def settle_queue(self, topic: TopicId, tx_write_pointer: int, commit: bool) -> int:
        """Settle a transaction's pending queue work as one binary request; how many."""
        return self._run(core.settle(topic, tx_write_pointer, commit))

    # -- reading --------------------------------------------------------------------------

    def bounds(
        self,
        topic: TopicId,
        *,
        start: MessageId | bytes | str | int | None = None,
        inclusive: bool = True,
        transaction: Transaction | None = None,
        limit: int | None = None,
    ) -> TopicBounds:
        """As over HTTP. With ``limit`` (what a read of that many would return) the call
        goes over REST: the binary protocol's bounds answer does not carry the count."""
        if limit is not None:
            return super().bounds(
                topic, start=start, inclusive=inclusive, transaction=transaction, limit=limit
            )
        return self._run(core.bounds(topic, start, inclusive, transaction))

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
        return self._run(core.poll(topic, start, inclusive, limit, transaction, wait_ms))
