"""``WriteBatcher``: group commit driven from the event loop.

Handlers of publish, store and rollback hand their operation to the batcher and await a
future. Per topic, at most one batch is being written (on a worker thread) at a time; the
operations that arrive meanwhile are taken together as the next batch as soon as it is
done. So a burst of concurrent requests costs one thread hand-off and one synced write,
not one of each per request; with nothing in flight an operation goes out in the next
turn of the loop (after the requests already read in this turn joined it).

Outcomes are ``MessagingService.write``'s: each future gets its own result or error, and
a request's outcome never depends on another one in its batch failing. An operation
submitted with a deadline (``time.monotonic()``) that passes before its batch is taken is
dropped unwritten: its future gets ``RequestTimeoutError``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import Any

from tms.errors import RequestTimeoutError, StorageUnavailableError
from tms.model import TopicId
from tms.service import MessagingService, WriteOperation

__all__ = ["WriteBatcher"]

Outcome = Callable[[Any], None]
"""Called once, on the loop, with an operation's result or the exception it failed with."""
_Item = tuple[WriteOperation, Outcome, float | None]


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():  # the request went away
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


class WriteBatcher:
    """See the module docstring. Use from the event loop's thread only.

    ``write_on_loop``: write each batch on the loop's own thread instead of a worker
    thread (the loop waits for the synced write; no thread hand-off, and no wait for the
    GIL to report the write done)."""

    def __init__(
        self,
        service: MessagingService,
        pool: Executor,
        loop: asyncio.AbstractEventLoop,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        write_on_loop: bool = False,
    ) -> None:
        self._svc = service
        self._pool = pool
        self._loop = loop
        self._monotonic = monotonic
        self._write_on_loop = write_on_loop
        self._pending: dict[TopicId, list[_Item]] = {}
        self._busy: set[TopicId] = set()  # a batch is being written, or is about to be

    def submit(
        self, topic: TopicId, kind: str, arg: Any, deadline: float | None = None
    ) -> asyncio.Future[Any]:
        """Queue one operation; the future resolves once it is durable (or failed)."""
        future: asyncio.Future[Any] = self._loop.create_future()
        self.enqueue(topic, kind, arg, partial(_resolve, future), deadline)
        return future

    def enqueue(
        self, topic: TopicId, kind: str, arg: Any, outcome: Outcome, deadline: float | None = None
    ) -> None:
        """Queue one operation; ``outcome`` is called once it is durable (or failed)."""
        pending = self._pending.get(topic)
        if pending is None:
            pending = self._pending[topic] = []
            if topic not in self._busy:
                self._busy.add(topic)
                self._loop.call_soon(self._flush, topic)
        pending.append(((kind, arg), outcome, deadline))

    def _flush(self, topic: TopicId) -> None:
        items = self._pending.pop(topic, None)
        if items and any(deadline is not None for _, _, deadline in items):
            items = self._drop_late(items)
        if not items:
            self._busy.discard(topic)
            return
        operations = [operation for operation, _, _ in items]
        if self._write_on_loop:
            try:
                results: list[Any] = self._svc.write(topic, operations)
            except Exception as exc:
                results = [exc] * len(items)
            self._deliver(items, results)
            self._loop.call_soon(self._flush, topic)  # what was read meanwhile
            return
        done = self._loop.run_in_executor(self._pool, self._svc.write, topic, operations)
        done.add_done_callback(lambda outcome: self._settle(topic, items, outcome))

    def _settle(
        self, topic: TopicId, items: list[_Item], outcome: asyncio.Future[list[Any]]
    ) -> None:
        error = (
            StorageUnavailableError("the write was cancelled")
            if outcome.cancelled()
            else outcome.exception()
        )
        results: list[Any] = [error] * len(items) if error is not None else outcome.result()
        self._deliver(items, results)
        self._flush(topic)  # what arrived meanwhile, or release the topic

    @staticmethod
    def _deliver(items: list[_Item], results: list[Any]) -> None:
        for (_, outcome, _), result in zip(items, results, strict=True):
            outcome(result)

    def _drop_late(self, items: list[_Item]) -> list[_Item]:
        """The items still in time; the others are answered ``RequestTimeoutError``."""
        now = self._monotonic()
        kept = []
        for item in items:
            deadline = item[2]
            if deadline is None or now <= deadline:
                kept.append(item)
            else:
                item[1](RequestTimeoutError("dropped unwritten: it waited past its timeout"))
        return kept
