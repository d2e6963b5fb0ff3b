"""txms as its users run it: the standalone stack (``python -m tms.standalone``: the
transaction server and the messaging service, one process, LevelDB on local disk; the
runner starts it with ``tms.standalone.Launched``), reached over loopback through its
real REST API and Thrift port.

Two systems share one stack:

* ``TxmsSystem`` ("txms"): ``tms.client.MessagingClient`` for everything (what an
  application uses), ``txn.rpc.client.ThriftTxClient`` for transactions; the latency
  consumer follows the topic *transactionally* (``follow`` with a transaction client),
  so it never sees an uncommitted or rolled-back message.
  Work queues (``Workload.QUEUE``) are queue topics driven through ``client.queue``.
* ``TxmsLean`` ("txms-lean"): publish only, the same request pre-encoded and sent by the
  load generator ``limits.LeanHttp``: the service's capacity when clients cost little.
* ``TxmsRpc`` ("txms-rpc"): as "txms", with ``MessagingClient("tms://...")``: the same
  client API over the binary protocol (docs/rpc.md) instead of REST; the pipelined
  publisher and the sender of the fastest latency points use ``tms.aio``'s
  ``publish_nowait`` (a future per request on one connection).

Every publish is acknowledged after its synced write, so both are durable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from benchmarks.peers.base import AsyncSender, Call, Cursor, Kind, SystemBase, Workload
from benchmarks.peers.limits import LeanHttp
from tms.aio import AsyncMessagingClient
from tms.client import MessagingClient
from tms.codec import avro
from tms.model import TopicId

__all__ = ["NAMESPACE", "TxmsLean", "TxmsReader", "TxmsRpc", "TxmsSystem"]

NAMESPACE = "bench"
_FILL_BATCH = 1000


def _topic(name: str) -> TopicId:
    return TopicId(NAMESPACE, name)


def _tx_client(address: str, name: str) -> Any:
    from txms_common.retry import RetryNTimes
    from txn.rpc.client import ThriftTxClient

    return ThriftTxClient(address, client_id=name, pool_size=1, retry=RetryNTimes(1))


class TxmsReader:
    """See ``base.Reader``. A cursor is a time in ms (inclusive: from ``first`` and
    ``mark``) or the id of the last message read (exclusive)."""

    def __init__(self, url: str, topic: str) -> None:
        self.client = MessagingClient(url)
        self.topic = _topic(topic)

    def first(self) -> Cursor:
        return 0

    def read(self, cursor: Cursor, limit: int) -> tuple[list[bytes], Cursor]:
        result = self.client.poll(
            self.topic, start=cursor, inclusive=isinstance(cursor, int), limit=limit
        )
        messages = result.messages
        if not messages:
            return [], cursor
        return [m[1] for m in messages], messages[-1][0]

    def close(self) -> None:
        self.client.close()


class _TxmsTopics(SystemBase):
    """Topic administration shared by both ways of driving the stack."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._admin = MessagingClient(url)

    def create_topic(self, topic: str) -> None:
        self._admin.create_topic(_topic(topic))

    def drop_topic(self, topic: str) -> None:
        self._admin.delete_topic(_topic(topic))

    def close(self) -> None:
        self._admin.close()


class TxmsSystem(_TxmsTopics):
    name = "txms"
    kind = Kind.TXMS
    description = (
        "txms standalone stack over loopback; MessagingClient (REST, Avro), ThriftTxClient"
    )
    durable = True
    forks = True
    workloads = frozenset(Workload) - {Workload.PIPELINED}  # no pipelining over HTTP/1.1

    def __init__(self, url: str, tx_address: str) -> None:
        super().__init__(url)
        self.tx_address = tx_address

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        client, t, payloads, n = MessagingClient(self.url), _topic(topic), list(batch), len(batch)

        def call() -> int:
            client.publish(t, payloads)
            return n

        return call

    def tx_publisher(self, topic: str, batch: Sequence[bytes], key: bytes) -> Call:
        client, t, payloads, n = MessagingClient(self.url), _topic(topic), list(batch), len(batch)
        tx_client = _tx_client(self.tx_address, f"bench-{key.decode(errors='replace')}")
        changes = [key]

        def call() -> int:
            tx = tx_client.start_short()
            client.publish(t, payloads, tx_write_pointer=tx.write_pointer)
            tx_client.can_commit_or_throw(tx, changes)
            tx_client.commit_or_throw(tx)
            return n

        return call

    def tx_cycle(self, key: bytes) -> Call:
        tx_client = _tx_client(self.tx_address, f"bench-{key.decode(errors='replace')}")
        changes = [key]

        def call() -> int:
            tx = tx_client.start_short()
            tx_client.can_commit_or_throw(tx, changes)
            tx_client.commit_or_throw(tx)
            return 1

        return call

    def create_queue(self, queue: str) -> None:
        self._admin.create_topic(_topic(queue), {"kind": "queue"})

    def drop_queue(self, queue: str) -> None:
        self._admin.delete_topic(_topic(queue))

    def queue_worker(self, queue: str, batch: Sequence[bytes]) -> Call:
        q = MessagingClient(self.url).queue(_topic(queue))
        payloads, n = list(batch), len(batch)
        expected = batch[0]

        def call() -> int:
            q.enqueue(payloads)
            messages = q.receive(n)
            if messages and messages[0].payload != expected:
                raise RuntimeError("txms returned a different payload")
            if messages:
                q.ack(messages)
            return len(messages)

        return call

    def sender(self, topic: str) -> Callable[[bytes], None]:
        client, t = MessagingClient(self.url), _topic(topic)
        return lambda payload: (client.publish(t, [payload]), None)[1]

    def subscribe(self, topic: str, stop: Callable[[], bool]) -> Iterator[bytes]:
        client = MessagingClient(self.url)
        tx_client = _tx_client(self.tx_address, "bench-follower")
        tx_client.status()  # connected before the first message is sent

        def follow() -> Iterator[bytes]:
            try:
                for message in client.follow(
                    _topic(topic), start=0, tx_client=tx_client, wait_ms=1000, stop=stop
                ):
                    yield message[1]
            finally:
                client.close()
                tx_client.close()

        return follow()

    def reader(self, topic: str) -> TxmsReader:
        return TxmsReader(self.url, topic)

    def fill(self, topic: str, count: int, payload: bytes) -> None:
        t = _topic(topic)
        for start in range(0, count, _FILL_BATCH):
            self._admin.publish(t, [payload] * min(_FILL_BATCH, count - start))

    def mark(self, topic: str) -> Cursor:
        return time.time_ns() // 1_000_000


class TxmsLean(_TxmsTopics):
    name = "txms-lean"
    kind = Kind.TXMS
    description = "txms standalone stack, publish requests pre-encoded (load generator)"
    durable = True
    forks = True
    workloads = frozenset({Workload.PUBLISH})

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        client = LeanHttp(
            self.url,
            f"/v1/namespaces/{NAMESPACE}/topics/{topic}/publish",
            avro.encode_publish_request(None, batch),
            "avro/binary",
        )
        n = len(batch)
        return lambda: (client.post(), n)[1]


class TxmsRpc(TxmsSystem):
    name = "txms-rpc"
    description = (
        "txms standalone stack over loopback; MessagingClient over the binary protocol "
        "(tms://), ThriftTxClient"
    )
    # transaction cycles do not involve the messaging service: the "txms" row has them
    workloads = frozenset(Workload) - {Workload.TX_CYCLE}
    sends_async = True

    def pipelined_publisher(self, topic: str, payload: bytes, window: int) -> Call:
        loop = asyncio.new_event_loop()
        client = AsyncMessagingClient(self.url)
        loop.run_until_complete(client.ping())  # connected before the timed start
        t, batch = _topic(topic), [payload]

        async def burst() -> int:
            await asyncio.gather(*[client.publish_nowait(t, batch) for _ in range(window)])
            return window

        return lambda: loop.run_until_complete(burst())

    async def async_sender(self, topic: str) -> AsyncSender:
        client = AsyncMessagingClient(self.url)
        await client.ping()
        return _AsyncSender(client, _topic(topic))


class _AsyncSender:
    def __init__(self, client: AsyncMessagingClient, topic: TopicId) -> None:
        self._client = client
        self._topic = topic

    def send(self, payload: bytes) -> Awaitable[Any]:
        return self._client.publish_nowait(self._topic, [payload])

    async def close(self) -> None:
        await self._client.close()
