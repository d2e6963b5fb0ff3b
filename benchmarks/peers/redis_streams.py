"""Redis Streams as a messaging system, with redis-py (and its hiredis parser).

A topic is a stream; a message is an entry with one field ``p`` holding the payload.

* publish: ``XADD`` per message, a batch in one pipeline (one round trip); one message
  alone is a plain ``XADD``; pipelined: ``window`` single ``XADD``s in one pipeline;
  latency above the async rate: redis-py's asyncio client, the sends made meanwhile
  pipelined together (auto-pipelining);
* read: ``XREAD COUNT n STREAMS key last-id``; the latency consumer blocks in
  ``XREAD BLOCK``;
* transactional publish: ``MULTI``, the batch's ``XADD``s and a ``SET`` of the caller's
  state key, ``EXEC`` (one round trip, applied atomically);
* transaction cycle: ``WATCH key``, then ``MULTI`` / ``SET key`` / ``EXEC`` (optimistic
  concurrency: the smallest conflict-checked write);
* bulk fill: pipelines of 1,000 ``XADD``;
* work queue: a stream with one consumer group (``XGROUP CREATE ... MKSTREAM``); enqueue
  the batch's ``XADD``s in one pipeline; receive ``XREADGROUP GROUP g <worker> COUNT n
  STREAMS key >`` (the entries join the worker's pending list: its lease); ack ``XACK``
  (on the ``always`` server only: durable acks).

With ``appendfsync always`` Redis fsyncs its append-only file before it answers the
commands of each event-loop iteration (a group commit); with ``everysec`` it answers at
once and fsyncs once a second, so up to a second of acknowledged writes can be lost.
Reads and sizes do not depend on the fsync policy, so the read workloads run on the
``always`` server only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from benchmarks.peers.base import AsyncSender, Call, Cursor, Kind, SystemBase, Workload

__all__ = ["RedisReader", "RedisStreams"]

_FIELD = b"p"
_GROUP = "workers"
_FILL_BATCH = 1000
_REWRITE_TIMEOUT_S = 120.0
_PIPELINES = 8  # auto-pipelined XADDs in flight at once (async sender)


def _connect(port: int) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)


class RedisReader:
    """See ``base.Reader``. A cursor is the id of the last entry read."""

    def __init__(self, port: int, topic: str) -> None:
        self.redis = _connect(port)
        self.key = topic

    def first(self) -> Cursor:
        return b"0-0"

    def read(self, cursor: Cursor, limit: int) -> tuple[list[bytes], Cursor]:
        answer = self.redis.xread({self.key: cursor}, count=limit)
        if not answer:
            return [], cursor
        entries = answer[0][1]
        return [fields[_FIELD] for _, fields in entries], entries[-1][0]

    def close(self) -> None:
        self.redis.close()


class _AsyncRedisSender:
    """``XADD``s from redis-py's asyncio client, pipelined automatically: the sends made
    while earlier pipelines are in flight go out together as the next pipeline (at most
    ``_PIPELINES`` in flight, each on a pooled connection), as ioredis's auto-pipelining
    does. One command per send each on its own connection overflows the pool at the
    higher rates."""

    def __init__(self, port: int, topic: str) -> None:
        import redis.asyncio

        self._redis = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=60)
        self._topic = topic
        self._pending: list[tuple[bytes, asyncio.Future[Any]]] = []
        self._in_flight = 0

    def send(self, payload: bytes) -> Awaitable[Any]:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((payload, future))
        if self._in_flight < _PIPELINES:
            self._start()
        return future

    def _start(self) -> None:
        batch, self._pending = self._pending, []
        self._in_flight += 1
        task = asyncio.ensure_future(self._execute(batch))
        task.add_done_callback(lambda _: None)

    async def _execute(self, batch: list[tuple[bytes, asyncio.Future[Any]]]) -> None:
        try:
            pipe = self._redis.pipeline(transaction=False)
            for payload, _ in batch:
                pipe.xadd(self._topic, {_FIELD: payload})
            try:
                answers = await pipe.execute()
            except Exception as exc:  # every send of the pipeline fails with it
                for _, future in batch:
                    future.set_exception(exc)
            else:
                for (_, future), answer in zip(batch, answers, strict=True):
                    future.set_result(answer)
        finally:
            self._in_flight -= 1
            if self._pending:
                self._start()

    async def close(self) -> None:
        await self._redis.aclose()


class RedisStreams(SystemBase):
    kind = Kind.PEER
    forks = True
    sends_async = True

    def __init__(self, port: int, appendfsync: str) -> None:
        self.port = port
        self.appendfsync = appendfsync
        self.name = f"redis-{appendfsync}"
        self.durable = appendfsync == "always"
        self.description = f"Redis Streams, appendonly yes, appendfsync {appendfsync} (redis-py)"
        writes = {
            Workload.PUBLISH,
            Workload.PIPELINED,
            Workload.TX_PUBLISH,
            Workload.TX_CYCLE,
            Workload.LATENCY,
        }
        reads = {Workload.CONSUME, Workload.TAIL, Workload.GROWTH, Workload.QUEUE}
        self.workloads = frozenset(writes | reads if self.durable else writes)
        self._admin = _connect(port)

    def create_topic(self, topic: str) -> None:
        self._admin.delete(topic)

    def drop_topic(self, topic: str) -> None:
        """Delete the stream and rewrite the append-only file (waiting for the rewrite),
        so the next measurement starts from a small file, with no automatic rewrite
        (Redis starts one by itself whenever the file doubles) still running."""
        import redis

        self._admin.delete(topic)
        deadline = time.monotonic() + _REWRITE_TIMEOUT_S
        while True:
            self._wait_for_rewrite(deadline)
            try:
                self._admin.bgrewriteaof()
            except redis.ResponseError as exc:
                if "already in progress" not in str(exc):
                    raise
                continue  # an automatic rewrite began first: it may predate the delete
            self._wait_for_rewrite(deadline)
            return

    def _wait_for_rewrite(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            info = self._admin.info("persistence")
            if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                return
            time.sleep(0.05)
        raise TimeoutError("Redis's append-only file rewrite did not finish")

    def create_queue(self, queue: str) -> None:
        self._admin.delete(queue)
        self._admin.xgroup_create(queue, _GROUP, id="$", mkstream=True)

    def drop_queue(self, queue: str) -> None:
        self.drop_topic(queue)

    def queue_worker(self, queue: str, batch: Sequence[bytes]) -> Call:
        import uuid

        r, n, expected = _connect(self.port), len(batch), batch[0]
        consumer = uuid.uuid4().hex
        pipe = r.pipeline(transaction=False)

        def call() -> int:
            for payload in batch:
                pipe.xadd(queue, {_FIELD: payload})
            pipe.execute()
            answer = r.xreadgroup(_GROUP, consumer, {queue: ">"}, count=n)
            if not answer:
                return 0
            entries = answer[0][1]
            if entries[0][1][_FIELD] != expected:
                raise RuntimeError("redis returned a different payload")
            r.xack(queue, _GROUP, *[entry_id for entry_id, _ in entries])
            return len(entries)

        return call

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        r, n = _connect(self.port), len(batch)
        if n == 1:
            fields = {_FIELD: batch[0]}
            return lambda: (r.xadd(topic, fields), 1)[1]
        pipe = r.pipeline(transaction=False)

        def call() -> int:
            for payload in batch:
                pipe.xadd(topic, {_FIELD: payload})
            pipe.execute()
            return n

        return call

    def pipelined_publisher(self, topic: str, payload: bytes, window: int) -> Call:
        pipe = _connect(self.port).pipeline(transaction=False)
        fields = {_FIELD: payload}

        def call() -> int:
            for _ in range(window):
                pipe.xadd(topic, fields)
            pipe.execute()
            return window

        return call

    async def async_sender(self, topic: str) -> AsyncSender:
        return _AsyncRedisSender(self.port, topic)

    def tx_publisher(self, topic: str, batch: Sequence[bytes], key: bytes) -> Call:
        r, n = _connect(self.port), len(batch)
        pipe = r.pipeline(transaction=True)
        counter = [0]

        def call() -> int:
            counter[0] += 1
            for payload in batch:
                pipe.xadd(topic, {_FIELD: payload})
            pipe.set(key, counter[0])
            pipe.execute()
            return n

        return call

    def tx_cycle(self, key: bytes) -> Call:
        r = _connect(self.port)
        counter = [0]

        def call() -> int:
            counter[0] += 1
            with r.pipeline(transaction=True) as pipe:
                pipe.watch(key)
                pipe.multi()
                pipe.set(key, counter[0])
                pipe.execute()
            return 1

        return call

    def sender(self, topic: str) -> Callable[[bytes], None]:
        r = _connect(self.port)
        return lambda payload: (r.xadd(topic, {_FIELD: payload}), None)[1]

    def subscribe(self, topic: str, stop: Callable[[], bool]) -> Iterator[bytes]:
        r = _connect(self.port)
        r.ping()

        def follow() -> Iterator[bytes]:
            last = b"0-0"
            try:
                while not stop():
                    answer = r.xread({topic: last}, count=1000, block=1000)
                    if answer:
                        entries = answer[0][1]
                        last = entries[-1][0]
                        for _, fields in entries:
                            yield fields[_FIELD]
            finally:
                r.close()

        return follow()

    def reader(self, topic: str) -> RedisReader:
        return RedisReader(self.port, topic)

    def fill(self, topic: str, count: int, payload: bytes) -> None:
        pipe = self._admin.pipeline(transaction=False)
        fields = {_FIELD: payload}
        for start in range(0, count, _FILL_BATCH):
            for _ in range(min(_FILL_BATCH, count - start)):
                pipe.xadd(topic, fields)
            pipe.execute()

    def mark(self, topic: str) -> Cursor:
        newest = self._admin.xrevrange(topic, count=1)
        return newest[0][0] if newest else b"0-0"

    def close(self) -> None:
        self._admin.close()

    def version(self) -> str:
        return str(self._admin.info("server")["redis_version"])
