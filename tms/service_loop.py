"""Writes from an event loop: the ``MessagingService`` methods that queue operations
to a topic's group commit without blocking the loop (``submit_async``, and
``submit_tickets`` for several at once without a task), a base class of it."""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar

from tms.errors import TmsError
from tms.metrics import TmsMetrics
from tms.model import TopicId
from tms.operations import Operation, Ticket, fail_tickets, settle_tickets
from tms.writer import TopicWriter

__all__ = ["LoopSubmit"]

R = TypeVar("R")


class LoopSubmit:
    """See the module docstring (and ``MessagingService``)."""

    metrics: TmsMetrics
    _opening: dict[tuple[asyncio.AbstractEventLoop, TopicId], asyncio.Future[TopicWriter]]
    _executor: Executor
    _closed: bool

    if TYPE_CHECKING:  # MessagingService's

        def _open_writer(self, topic: TopicId) -> TopicWriter | None: ...

        def _writer(self, topic: TopicId) -> TopicWriter: ...

    async def submit_async(self, op: Operation[R], *, deadline: float | None = None) -> R:
        """``submit`` from an event loop, without blocking it. ``deadline``
        (``time.monotonic()``): if the operation is still queued then, it is not written
        and ``RequestTimeoutError`` says so (it may be sent again safely)."""
        started = time.perf_counter()
        ticket = Ticket(op, deadline)
        await self.submit_tickets(op.topic, [ticket], asyncio.get_running_loop())
        self.finished(ticket, started)
        return ticket.result()

    def submit_tickets(
        self, topic: TopicId, tickets: list[Ticket[Any]], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[None]:
        """Queue tickets of ``topic``'s operations as one call to its group commit from
        ``loop``'s thread (no task when its writer is open); the future resolves once each
        has its result or error. One loop's calls are written in the order they were
        made. Call ``finished`` for each ticket."""
        # Behind an opening under way, so calls of one loop keep their order.
        writer = None if (loop, topic) in self._opening else self._open_writer(topic)
        if writer is None:
            return loop.create_task(self._submit_opening(topic, tickets, loop))
        settled: asyncio.Future[None] = loop.create_future()
        try:
            queued = writer.submit_async(tickets, loop)
        except TmsError as exc:
            fail_tickets(tickets, exc)
            settled.set_result(None)
        else:
            queued.add_done_callback(functools.partial(settle_tickets, tickets, settled))
        return settled

    async def _submit_opening(
        self, topic: TopicId, tickets: list[Ticket[Any]], loop: asyncio.AbstractEventLoop
    ) -> None:
        try:
            await (await self._opened(topic, loop)).submit_async(tickets, loop)
        except TmsError as exc:
            fail_tickets(tickets, exc)

    def finished(self, ticket: Ticket[object], started: float) -> None:
        """Count a settled ticket's operation (``started``: ``time.perf_counter()``)."""
        seconds = None if ticket.error is not None else time.perf_counter() - started
        self.metrics.operation(ticket.op.kind, seconds)

    async def _opened(self, topic: TopicId, loop: asyncio.AbstractEventLoop) -> TopicWriter:
        """The topic's writer, opened on a thread (it reads the store): one opening for
        every call of ``loop`` waiting for it, which resume in the order they came."""
        key = (loop, topic)
        opening = self._opening.get(key)
        if opening is None:
            if self._closed:  # its threads may be gone
                raise TmsError("the messaging service is closed")
            opening = loop.run_in_executor(self._executor, self._writer, topic)
            self._opening[key] = opening
            opening.add_done_callback(lambda _: self._opening.pop(key, None))
        return await asyncio.shield(opening)  # one caller going away cancels nothing
