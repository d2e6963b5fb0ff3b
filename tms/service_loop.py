"""Writes from an event loop: the ``MessagingService`` methods that queue operations
to a topic's group commit without blocking the loop (``submit_async``;
``submit_shielded`` for one whose caller must learn its outcome even if cancelled;
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


class _Opening:
    """A topic's writer being opened for one loop, and the calls waiting for it (their
    tickets and futures), in the order they were made."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: list[tuple[list[Ticket[Any]], asyncio.Future[None]]] = []


def _submit(
    writer: TopicWriter,
    tickets: list[Ticket[Any]],
    settled: asyncio.Future[None],
    loop: asyncio.AbstractEventLoop,
) -> None:
    """One call to ``writer``'s group commit; ``settled`` resolves once each ticket has
    its outcome."""
    try:
        queued = writer.submit_async(tickets, loop)
    except TmsError as exc:
        fail_tickets(tickets, exc)
        settled.set_result(None)
    else:
        queued.add_done_callback(functools.partial(settle_tickets, tickets, settled))


class LoopSubmit:
    """See the module docstring (and ``MessagingService``)."""

    metrics: TmsMetrics
    _opening: dict[tuple[asyncio.AbstractEventLoop, TopicId], _Opening]
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

    async def submit_shielded(
        self, op: Operation[R], *, deadline: float | None = None
    ) -> tuple[R, bool]:
        """``submit_async`` for an operation whose outcome must reach its caller (a
        receive's leases): once queued it is written whatever happens to the caller, so a
        cancellation meanwhile does not end the wait for its outcome. Returns the result
        and whether the caller was cancelled meanwhile (it should then answer with the
        result, and go no further)."""
        started = time.perf_counter()
        ticket = Ticket(op, deadline)
        settled = self.submit_tickets(op.topic, [ticket], asyncio.get_running_loop())
        cancelled = False
        while not settled.done():
            try:
                await asyncio.shield(settled)
            except asyncio.CancelledError:
                cancelled = True
        settled.result()  # its exception, if it failed as a whole
        self.finished(ticket, started)
        return ticket.result(), cancelled

    def submit_tickets(
        self, topic: TopicId, tickets: list[Ticket[Any]], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[None]:
        """Queue tickets of ``topic``'s operations as one call to its group commit from
        ``loop``'s thread (no task); the future resolves once each has its result or
        error. One loop's calls are written in the order they were made, also while the
        topic's writer is being opened. Call ``finished`` for each ticket."""
        settled: asyncio.Future[None] = loop.create_future()
        opening = self._opening.get((loop, topic))
        if opening is not None:  # behind the calls already waiting for the writer
            opening.waiting.append((tickets, settled))
            return settled
        writer = self._open_writer(topic)
        if writer is None:
            self._open(topic, loop).waiting.append((tickets, settled))
        else:
            _submit(writer, tickets, settled, loop)
        return settled

    def _open(self, topic: TopicId, loop: asyncio.AbstractEventLoop) -> _Opening:
        """Start opening the topic's writer on a thread (it reads the store)."""
        future: asyncio.Future[TopicWriter] = loop.create_future()
        try:
            if self._closed:  # its threads may be gone
                raise RuntimeError
            future = loop.run_in_executor(self._executor, self._writer, topic)
        except RuntimeError:  # closed, or its executor shut down
            future.set_exception(TmsError("the messaging service is closed"))
        key, opening = (loop, topic), _Opening()
        self._opening[key] = opening
        future.add_done_callback(functools.partial(self._opened, key, opening, loop))
        return opening

    def _opened(
        self,
        key: tuple[asyncio.AbstractEventLoop, TopicId],
        opening: _Opening,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[TopicWriter],
    ) -> None:
        """Submit every call that waited for the writer, in the order they came, then let
        later calls go to the writer directly: all in this one callback, so no call of
        the loop can pass one that waited."""
        try:
            error: BaseException | None
            if future.cancelled():
                error = TmsError("opening the writer was cancelled")
            else:
                error = future.exception()
            for tickets, settled in opening.waiting:
                if settled.done():  # cancelled by its caller: nothing of it was queued
                    continue
                if isinstance(error, TmsError):
                    fail_tickets(tickets, error)
                    settled.set_result(None)
                elif error is not None:
                    settled.set_exception(error)
                else:
                    try:
                        _submit(future.result(), tickets, settled, loop)
                    except Exception as exc:  # a bug: this call's future says so
                        settled.set_exception(exc)
        finally:
            del self._opening[key]

    def finished(self, ticket: Ticket[object], started: float) -> None:
        """Count a settled ticket's operation (``started``: ``time.perf_counter()``)."""
        seconds = None if ticket.error is not None else time.perf_counter() - started
        self.metrics.operation(ticket.op.kind, seconds)
