"""The contract every measured system implements: txms, its peers and the physical limits.

The harness (``workloads``) drives every system through this one interface, so the
txms adapter exercises the same code paths as the Redis and PostgreSQL ones (and the
unit tests, which run on txms alone, cover the harness itself).

A *topic* is a name made of ``[a-z0-9_]``: a txms topic, a Redis stream, a PostgreSQL
table. A *cursor* is a position in a topic, opaque to the harness: only the reader that
made it, or ``System.mark``, gives one meaning.

Lifecycle and threading:

* The runner builds a system once its server is up; ``close()`` releases what the
  system itself holds (never the server: that belongs to the runner).
* ``publisher``, ``tx_publisher``, ``tx_cycle`` and ``sender`` are called in the
  process that will use what they return (a forked worker process, when ``forks`` is
  true), once per caller: each opens its own connection, used by one thread at a time.
  A system with ``forks`` false (an in-process database) is driven by threads of this
  process only. ``subscribe`` connects before it returns, so a consumer is listening
  before the first message is sent.
* ``queue_worker`` likewise, once per competing worker.
* ``create_topic``, ``drop_topic``, ``create_queue``, ``drop_queue``, ``fill``, ``mark``
  and ``reader`` are called from
  the runner's own thread, one at a time.

A method whose workload is not in ``workloads`` may raise ``UnsupportedError`` (a
``NotImplementedError``; ``SystemBase`` does so for every workload); the
harness never calls it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol

__all__ = [
    "AsyncSender",
    "Call",
    "Cursor",
    "Kind",
    "Reader",
    "System",
    "SystemBase",
    "UnsupportedError",
    "Workload",
]

#: One request: returns how many messages (or transaction cycles) it completed.
Call = Callable[[], int]
#: A position in a topic, meaningful only to the system that made it.
Cursor = Any


class Workload(enum.StrEnum):
    PUBLISH = "publish"
    PIPELINED = "pipelined"
    CONSUME = "consume"
    TAIL = "tail"
    LATENCY = "latency"
    TX_PUBLISH = "tx_publish"
    TX_CYCLE = "tx_cycle"
    GROWTH = "growth"
    QUEUE = "queue"


class Kind(enum.StrEnum):
    TXMS = "txms"
    PEER = "peer"
    LIMIT = "limit"


class Reader(Protocol):
    def first(self) -> Cursor:
        """The cursor before the oldest message of the topic."""

    def read(self, cursor: Cursor, limit: int) -> tuple[list[bytes], Cursor]:
        """Up to ``limit`` payloads after ``cursor``, oldest first, and the cursor after
        the last one returned (``cursor`` itself when there was none)."""

    def close(self) -> None: ...


class AsyncSender(Protocol):
    """Publishing from an event loop without waiting for each answer."""

    def send(self, payload: bytes) -> Awaitable[Any]:
        """Start one publish (one message per request); the awaitable is its answer."""

    async def close(self) -> None: ...


class System(Protocol):
    #: key of the system in results ("txms", "redis-always", "plyvel", ...)
    name: str
    kind: Kind
    #: one line for the docs: what is measured, with which client
    description: str
    #: true when every acknowledged publish is on disk (fsynced) before the answer
    durable: bool
    forks: bool
    workloads: frozenset[Workload]
    #: ``async_sender`` works: it takes the latency points above ``Settings.async_rate``
    sends_async: bool

    def create_topic(self, topic: str) -> None: ...

    def drop_topic(self, topic: str) -> None:
        """Remove the topic and, where the system allows, its storage."""

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        """A call that publishes ``batch`` (in one request where the system has such a
        thing) and returns once it is acknowledged (durable, when ``durable``)."""

    def pipelined_publisher(self, topic: str, payload: bytes, window: int) -> Call:
        """A call that publishes ``window`` messages, one per request, all sent before
        any answer is awaited (one connection), and returns once all are acknowledged."""

    def tx_publisher(self, topic: str, batch: Sequence[bytes], key: bytes) -> Call:
        """A call that publishes ``batch`` atomically with a change of state under
        ``key`` (this caller's own key, so callers never conflict)."""

    def tx_cycle(self, key: bytes) -> Call:
        """A call that runs the system's smallest durable transaction writing ``key``."""

    def sender(self, topic: str) -> Callable[[bytes], None]:
        """Publishes one message per call, as ``publisher`` does."""

    async def async_sender(self, topic: str) -> AsyncSender:
        """For offered rates one caller cannot reach waiting for each answer; made and
        used on the running event loop."""

    def subscribe(self, topic: str, stop: Callable[[], bool]) -> Iterator[bytes]:
        """Every payload of the topic from its start, in order, as it arrives (waiting
        for new ones, as a consumer at the tail would); ends when ``stop()``."""

    def reader(self, topic: str) -> Reader: ...

    def fill(self, topic: str, count: int, payload: bytes) -> None:
        """Append ``count`` copies of ``payload`` by the system's fastest bulk path."""

    def mark(self, topic: str) -> Cursor:
        """A cursor from which a read returns what is published after this call (it may
        also return a few messages published just before it)."""

    def create_queue(self, queue: str) -> None:
        """An empty work queue (competing consumers, leases, acks)."""

    def drop_queue(self, queue: str) -> None: ...

    def queue_worker(self, queue: str, batch: Sequence[bytes]) -> Call:
        """A call that enqueues ``batch`` (one request), leases up to ``len(batch)`` due
        messages (one request) and acks them (one request), each step durable; returns
        how many it received and acked (other workers compete for the same messages)."""

    def close(self) -> None: ...


class UnsupportedError(NotImplementedError):
    """A workload the system does not take part in."""

    def __init__(self, system: str, what: str) -> None:
        super().__init__(f"{system} does not support {what}")


class SystemBase:
    """Defaults for adapters: every workload method raises ``UnsupportedError``; ``close`` and
    ``drop_topic`` do nothing. Subclasses set the class attributes of ``System``."""

    name = "?"
    kind = Kind.PEER
    description = ""
    durable = True
    forks = True
    workloads: frozenset[Workload] = frozenset()
    sends_async = False

    def create_topic(self, topic: str) -> None:
        raise UnsupportedError(self.name, "topics")

    def drop_topic(self, topic: str) -> None:
        return None

    def publisher(self, topic: str, batch: Sequence[bytes]) -> Call:
        raise UnsupportedError(self.name, Workload.PUBLISH)

    def pipelined_publisher(self, topic: str, payload: bytes, window: int) -> Call:
        raise UnsupportedError(self.name, Workload.PIPELINED)

    def tx_publisher(self, topic: str, batch: Sequence[bytes], key: bytes) -> Call:
        raise UnsupportedError(self.name, Workload.TX_PUBLISH)

    def tx_cycle(self, key: bytes) -> Call:
        raise UnsupportedError(self.name, Workload.TX_CYCLE)

    def sender(self, topic: str) -> Callable[[bytes], None]:
        raise UnsupportedError(self.name, Workload.LATENCY)

    async def async_sender(self, topic: str) -> AsyncSender:
        raise UnsupportedError(self.name, "publishing without waiting")

    def subscribe(self, topic: str, stop: Callable[[], bool]) -> Iterator[bytes]:
        raise UnsupportedError(self.name, Workload.LATENCY)

    def reader(self, topic: str) -> Reader:
        raise UnsupportedError(self.name, Workload.CONSUME)

    def fill(self, topic: str, count: int, payload: bytes) -> None:
        raise UnsupportedError(self.name, "fill")

    def mark(self, topic: str) -> Cursor:
        raise UnsupportedError(self.name, "mark")

    def create_queue(self, queue: str) -> None:
        raise UnsupportedError(self.name, Workload.QUEUE)

    def drop_queue(self, queue: str) -> None:
        return None

    def queue_worker(self, queue: str, batch: Sequence[bytes]) -> Call:
        raise UnsupportedError(self.name, Workload.QUEUE)

    def close(self) -> None:
        return None
