"""What the binary protocol's operations do: the one module that couples the protocol to
``MessagingService``.

``dispatch`` takes an operation of ``tms.rpc.ops.OPS``, its decoded request struct, the
request's topic, its deadline (``time.monotonic()``; None: none) and ``done``, and calls
``done`` exactly once, on the event loop, with the response (a struct or its encoded
body) or the ``TmsError`` it failed with.

* A write is the typed operation its entry makes of the request (``tms.rpc.writes``).
  The writes of one turn of the loop go to each topic's group commit together, in the
  order they came, as one call without a task (``MessagingService.submit_tickets``):
  what arrives while a batch is being written is the next batch, one synced write for
  all of it. A write still queued when its deadline passes is dropped unwritten.
* Plain publishes (``writes.plain_payloads``) that follow each other in a turn's writes
  to a topic, with one deadline, are written as one ``Publish`` — one operation and
  one ticket, not one per request. Each request's messages stay contiguous and in call
  order, as when written one by one; they succeed or fail together, as they would in
  one batch (what fails a plain publish is its topic, its deadline or the batch's
  write), and each request is answered and counted in the metrics on its own.
* Reads run on the worker pool; one that starts after its deadline is dropped. A poll
  with ``wait_ms`` that finds nothing waits for the topic to change (``TopicWaiters``),
  and answers at once when it is held by an uncommitted entry. Once woken, it reads
  again on the loop's thread when the store's reads are local
  (``MessagingService.local_reads``: LevelDB while up, memory), saving the hop to a
  worker and back: it reads at the topic's tail, what was written since it waited. A
  small poll (``LOOP_READ_MESSAGES``) is read on the loop's thread from the start, and
  one that does not wait is answered there without a task.
* A queue's receive is a write too (the lease is durable before it is answered); with
  ``wait_ms`` one that leased nothing waits as the REST route's does
  (``tms.http.waiting.receive_waiting``). ``close`` cuts such a wait short, never a
  receive being written: that one answers what it leased.
* The subscription operations are ``tms.rpc.subs.SubscriptionOps``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import Any

from tms.codec.avro import ConsumeSpec
from tms.errors import (
    RequestTimeoutError,
    TmsError,
    TmsInvalidArgumentError,
    TmsTransientError,
)
from tms.fetcher import FetchRequest, fetch_request_of
from tms.http.waiting import LongPoll, TopicWaiters, receive_waiting
from tms.model import TopicBounds, TopicId
from tms.operations import Receive, Ticket
from tms.rpc import writes
from tms.rpc.config import LOOP_READ_BYTES, LOOP_READ_MESSAGES, LOOP_READ_ROWS
from tms.rpc.frames import rpc
from tms.rpc.ops import Op
from tms.rpc.subs import SubscriptionOps
from tms.rpc.values import position
from tms.service import MessagingService

__all__ = ["Backend", "Done"]

log = logging.getLogger(__name__)

Done = Callable[[Any], None]
"""Called once with the response struct (or its encoded bytes), or the ``TmsError`` the
operation failed with (any other exception: a bug, answered as an internal error)."""
_Write = tuple[Ticket[Any], Callable[[Any], Any], Done]


class _Run:
    """Plain publishes next to each other in a turn's writes to one topic, with one
    deadline: their payloads, in order, and each request's answer and ``done``."""

    __slots__ = ("answers", "deadline", "payloads", "requests", "ticket")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.payloads: list[bytes] = []
        self.answers: list[tuple[Callable[[Any], Any], Done]] = []
        self.requests = 0
        """How many requests the run is (an answer may stand for several)."""
        self.ticket: Ticket[Any] | None = None  # once submitted


def _settle(convert: Callable[[Any], Any], done: Done, future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        done(TmsError("the operation was cancelled"))
    elif (error := future.exception()) is not None:
        done(error)
    else:
        try:
            response = convert(future.result())
        except TmsError as exc:
            response = exc
        done(response)


_MESSAGE_OVERHEAD = 28  # in a PollResponse: the 20-byte id, two 4-byte lengths


def _bounds_response(bounds: TopicBounds) -> Any:
    return rpc.BoundsResponse(
        first=position(bounds.first), last=position(bounds.last), held=position(bounds.held)
    )


def _fetch_request(req: Any) -> FetchRequest:
    if req.start_id is not None and req.start_ms is not None:
        raise TmsInvalidArgumentError("start from a message id or a time, not both")
    start = req.start_id if req.start_id is not None else req.start_ms
    inclusive = True if req.inclusive is None else bool(req.inclusive)
    return fetch_request_of(ConsumeSpec(start, inclusive, req.limit, req.transaction))


class Backend(SubscriptionOps):
    """See the module docstring. Use from the event loop's thread only."""

    def __init__(
        self,
        service: MessagingService,
        pool: Executor,
        loop: asyncio.AbstractEventLoop,
        *,
        max_wait_ms: int,
        max_poll_bytes: int,
        held_recheck_ms: int = 100,
        held_watch_ms: int = 2,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.svc = service
        self._pool = pool
        self._loop = loop
        self._max_wait_ms = max_wait_ms
        self._max_poll_bytes = max_poll_bytes
        self._monotonic = monotonic
        self._waiters = TopicWaiters(loop)
        self._polls: set[asyncio.Task[None]] = set()
        self._writes: set[asyncio.Task[None]] = set()  # running: referenced until done
        self._queued: dict[TopicId, list[_Write | _Run]] = {}  # writes of this loop turn
        self._last: tuple[TopicId | None, list[_Write | _Run]] = (None, [])  # the last of them
        self._long_poll = LongPoll(
            self._waiters,
            service.guard,
            pool,
            recheck_s=held_recheck_ms / 1000,
            watch_s=held_watch_ms / 1000 or None,
            metrics=service.metrics,
            monotonic=monotonic,
        )
        service.add_listener(self._waiters.listener)
        service.add_finish_listener(self._waiters.finish_listener)

    def close(self) -> None:
        """Stop listening to the service; cancel the polls still waiting (a waiting
        receive whose write is under way answers what it leased)."""
        self.svc.remove_listener(self._waiters.listener)
        self.svc.remove_finish_listener(self._waiters.finish_listener)
        self._long_poll.close()
        for task in list(self._polls):
            task.cancel()

    # -- dispatch -----------------------------------------------------------------------

    def dispatch(
        self, op: Op, req: Any, topic: TopicId, deadline: float | None, done: Done
    ) -> None:
        """Do ``op`` (see the module docstring); ``TmsError`` raised here is the answer."""
        if op.write is None:
            getattr(self, op.handler)(req, topic, deadline, done)
            return
        assert op.answer is not None
        if op.write is writes.publish and (payloads := writes.plain_payloads(req)) is not None:
            self._plain(topic, payloads, deadline, op.answer, done)
            return
        self._write(topic, Ticket(op.write(req, topic), deadline), op.answer, done)

    def _turn(self, topic: TopicId) -> list[_Write | _Run]:
        """The writes of this loop turn to ``topic`` so far (submitted at its end)."""
        last_topic, last = self._last
        if topic is last_topic:  # most writes of a turn go where the one before went
            return last
        queued = self._queued.get(topic)
        if queued is None:
            if not self._queued:
                self._loop.call_soon(self._submit_queued)
            queued = self._queued[topic] = []
        self._last = (topic, queued)
        return queued

    def _write(
        self, topic: TopicId, ticket: Ticket[Any], answer: Callable[[Any], Any], done: Done
    ) -> None:
        """Submit ``ticket`` with the other writes of this loop turn."""
        self._turn(topic).append((ticket, answer, done))

    def publish_plain(
        self,
        topic: TopicId,
        payloads: list[bytes],
        deadline: float | None,
        done: Done,
        *,
        requests: int = 1,
    ) -> None:
        """A plain publish of ``payloads`` (``writes.plain_payloads``) whose request the
        caller read itself: as ``dispatch`` of it. ``requests``: how many plain publishes
        of the caller, next to each other, ``payloads`` are (each request's payloads
        contiguous, in order), answered by one call of ``done`` and counted each."""
        self._plain(topic, payloads, deadline, writes.publish_answer, done, requests=requests)

    def _plain(
        self,
        topic: TopicId,
        payloads: list[bytes],
        deadline: float | None,
        answer: Callable[[Any], Any],
        done: Done,
        *,
        requests: int = 1,
    ) -> None:
        """A plain publish: joins the run of them at the end of this turn's writes to
        ``topic`` (see the module docstring)."""
        turn = self._turn(topic)
        run = turn[-1] if turn else None
        if not isinstance(run, _Run) or run.deadline != deadline:
            run = _Run(deadline)
            turn.append(run)
        run.payloads += payloads
        run.answers.append((answer, done))
        run.requests += requests

    def _submit_queued(self) -> None:
        """The writes of one loop turn, each topic's in one call to its group commit."""
        queued, self._queued = self._queued, {}
        self._last = (None, [])
        started = time.perf_counter()
        for topic, turn in queued.items():
            tickets: list[Ticket[Any]] = []
            for write in turn:
                if isinstance(write, _Run):
                    op = writes.plain_publish(topic, write.payloads)
                    write.ticket = Ticket(op, write.deadline)
                    tickets.append(write.ticket)
                else:
                    tickets.append(write[0])
            settled = self.svc.submit_tickets(topic, tickets, self._loop)
            settled.add_done_callback(partial(self._answer, turn, tickets, started))

    def _answer(
        self,
        turn: list[_Write | _Run],
        tickets: list[Ticket[Any]],
        started: float,
        settled: asyncio.Future[None],
    ) -> None:
        """Answer each write of ``turn``, each on its own: one whose answer cannot be
        made (a bug) is answered as an internal error and the others still are."""
        if settled.cancelled():
            failed: BaseException | None = TmsError("the write was cancelled")
        else:
            failed = settled.exception()
        if failed is not None:
            error = TmsError(f"the write failed: {failed!r}")
            for ticket in tickets:
                ticket.fail(error)
        try:
            self._count(turn, started)
        except Exception:  # counting must not keep the writes unanswered
            log.exception("counting a turn's writes failed")
        for write, ticket in zip(turn, tickets, strict=True):
            answers = write.answers if isinstance(write, _Run) else (write[1:],)
            for answer, done in answers:
                try:
                    response = answer(ticket.result())
                except Exception as exc:  # a TmsError; anything else: an internal error
                    response = exc
                try:
                    done(response)
                except Exception:  # answering one must not keep the others unanswered
                    log.exception("answering a %s write failed", ticket.op.kind)

    def _count(self, turn: list[_Write | _Run], started: float) -> None:
        """The turn's requests in the metrics, per kind (a run: each of its requests)."""
        counts: dict[str, list[int]] = {}
        for write in turn:
            if isinstance(write, _Run):
                ticket, n = write.ticket, write.requests
            else:
                ticket, n = write[0], 1
            assert ticket is not None
            count = counts.get(ticket.op.kind)
            if count is None:
                count = counts[ticket.op.kind] = [0, 0]
            count[ticket.error is not None] += n
        seconds = time.perf_counter() - started
        for kind, (ok, failed) in counts.items():
            self.svc.metrics.operations(kind, ok, failed, seconds)

    def receive(self, req: Any, topic: TopicId, deadline: float | None, done: Done) -> None:
        """A queue's receive (op 7): a write like the others, or with ``wait_ms`` one
        that waits for a ready message when it leased nothing."""
        request = writes.receive(req, topic).request
        wait_ms = req.wait_ms or 0
        if not 0 <= wait_ms <= self._max_wait_ms:
            raise TmsInvalidArgumentError(f"wait_ms must be in 0..{self._max_wait_ms}")
        if not wait_ms:
            self._write(topic, Ticket(Receive(request), deadline), writes.receive_answer, done)
            return
        run = receive_waiting(
            self.svc, self._waiters, request, wait_ms, deadline=deadline, monotonic=self._monotonic
        )

        async def received() -> Any:
            return writes.receive_answer(await run)

        self._task(self._polls, received(), done)

    # -- reads ----------------------------------------------------------------------------

    def _in_time(self, deadline: float | None) -> None:
        if deadline is not None and self._monotonic() > deadline:
            raise RequestTimeoutError("dropped unread: it waited past its timeout")

    def bounds(self, req: Any, topic: TopicId, deadline: float | None, done: Done) -> None:
        request = _fetch_request(req)

        def read() -> TopicBounds:
            self._in_time(deadline)
            return self.svc.bounds(topic, request)

        future = self._loop.run_in_executor(self._pool, read)
        future.add_done_callback(partial(_settle, _bounds_response, done))

    def poll(self, req: Any, topic: TopicId, deadline: float | None, done: Done) -> None:
        request = _fetch_request(req)
        wait_ms = req.wait_ms or 0
        if not 0 <= wait_ms <= self._max_wait_ms:
            raise TmsInvalidArgumentError(f"wait_ms must be in 0..{self._max_wait_ms}")
        small = request.limit <= LOOP_READ_MESSAGES
        if not wait_ms and small and self.svc.local_reads():
            # small and not waiting: answered here, without a task or a worker's hop
            response = self._loop_read(topic, request, deadline)
            if response is not None:
                done(response)
                return
            small = False  # it passed too many rows for the loop: on a worker
        task = self._loop.create_task(
            self._poll(topic, request, wait_ms, deadline, done, on_loop=small)
        )
        self._polls.add(task)
        task.add_done_callback(self._polls.discard)

    async def _poll(
        self,
        topic: TopicId,
        request: FetchRequest,
        wait_ms: int,
        deadline: float | None,
        done: Done,
        *,
        on_loop: bool,
    ) -> None:
        try:
            response = await self._polled(topic, request, wait_ms, deadline, on_loop)
        except asyncio.CancelledError:
            done(TmsTransientError("the server is stopping"))
            raise
        except Exception as exc:  # a TmsError; anything else is answered as an internal error
            response = exc
        done(response)

    async def _polled(
        self,
        topic: TopicId,
        request: FetchRequest,
        wait_ms: int,
        deadline: float | None,
        on_loop: bool,
    ) -> Any:
        """``on_loop``: the first read may go on the loop's thread (a small poll's)."""
        until = self._monotonic() + wait_ms / 1000
        woken = on_loop
        while True:
            # Registered before reading, so a write that lands after the read's snapshot
            # wakes us (its listener runs after the write).
            waiter = self._waiters.register(topic) if wait_ms else None
            try:
                response: Any = None
                if woken and self.svc.local_reads():
                    # at the topic's tail, what the wake-up announced (or a small read):
                    # short, from memory, here rather than a hop to a worker and back
                    response = self._loop_read(topic, request, deadline)
                if response is None:
                    response = await self._loop.run_in_executor(
                        self._pool, self._read, topic, request, deadline
                    )
                remaining = until - self._monotonic()
                if response.ids or response.held or waiter is None or remaining <= 0:
                    return response
                deadline = None  # it has been served once: waiting is not queueing
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, remaining)
                woken = True
            finally:
                if waiter is not None:
                    self._waiters.discard(topic, waiter)

    def _loop_read(self, topic: TopicId, request: FetchRequest, deadline: float | None) -> Any:
        """``_read`` on the loop's thread: at most ``LOOP_READ_BYTES`` of answer and about
        ``LOOP_READ_ROWS`` rows passed; None when it would pass more (read on a worker)."""
        return self._read(topic, request, deadline, LOOP_READ_BYTES, LOOP_READ_ROWS)

    def _read(
        self,
        topic: TopicId,
        request: FetchRequest,
        deadline: float | None,
        most_bytes: int | None = None,
        most_rows: int | None = None,
    ) -> Any:
        """One read (on a worker thread, or a woken poll's on the loop's): up to the
        limit, and about ``max_poll_bytes`` of answer, or ``most_bytes`` if less (at least
        one message; each message counts its payload, its id and their two length
        prefixes, so many small messages fill an answer too). None when it stopped after
        passing ``most_rows`` rows (``MessageFetcher.cut``): nothing answered."""
        self._in_time(deadline)
        svc = self.svc
        fetcher = svc.read(topic, request, most_rows=most_rows)
        ids: list[bytes] = []
        payloads: list[bytes] = []
        budget = (
            self._max_poll_bytes if most_bytes is None else min(most_bytes, self._max_poll_bytes)
        )
        size = 0
        for mid, payload in fetcher:
            ids.append(mid)
            payloads.append(payload)
            size += len(payload) + _MESSAGE_OVERHEAD
            if size >= budget:
                break
        if fetcher.cut:
            return None
        size -= len(ids) * _MESSAGE_OVERHEAD
        svc.metrics.fetched(topic, len(ids), size)
        return rpc.PollResponse(ids=ids, payloads=payloads, held=fetcher.held)
