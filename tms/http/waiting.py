"""Long-poll: polls that wait on the event loop for something to read.

A poll with ``wait_ms`` that found nothing waits for one of:

* the topic to change (``TopicWaiters.listener``, called by the writer after each batch
  that added or rolled back entries): it reads again;
* when it stopped at an entry of a transaction in progress (``held``): that transaction
  to **finish**. Its reader needs a newer transaction to pass it, so the poll answers
  (held, ``finished``) at once, and the client reads on with a fresh transaction
  instead of retrying with a growing pause. The service learns it from the publisher's
  post-commit step (``MessagingService.transactions_finished``: the ``finished`` route),
  or, failing that, from the transaction manager: while any poll is held, one watcher
  task of the ``LongPoll`` asks it every ``watch_s`` (``held_watch_ms``, 2 ms by
  default) about every pointer held on, in one call (``WritePointerGuard.state``: the
  manager's durable answer, so a commit a crash could lose wakes nobody), and
  wakes the polls held behind the ones that finished (slowing down, up to
  ``recheck_s``, while nothing it watches finishes); each poll also asks on its own
  every ``held_recheck_ms`` (``recheck_s``), which is how it learns that the manager
  cannot be asked. Without a transaction manager it answers held (not finished) after
  that interval. A poll that asked to
  (``on_finished``, a subscription poll outside a transaction of its own) reads again
  instead, with a view brought up to date (``tms.subread.read_after_finish``), and
  answers the messages at once: no second request.

Pointers reported finished are remembered per topic (the newest ``RECENT``), so a
report that arrives between a poll's read and its registering is not lost.

A queue's receive with ``wait_ms`` that leased nothing (``receive_waiting``, for REST
and the binary protocol alike) waits for the queue to get a ready message (its writer's
listener, after an enqueue, a commit, a nack), or until the next scheduled message or
lease expiry the queue knows of comes due, whichever is first, and receives again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, TypeVar

from tms.errors import TmsError
from tms.guard import WritePointerGuard
from tms.metrics import TmsMetrics
from tms.model import TopicId
from tms.operations import Receive
from tms.queues import ReceiveRequest, ReceiveResult

if TYPE_CHECKING:
    from tms.service import MessagingService

__all__ = ["RECENT", "LongPoll", "TopicWaiters", "receive_waiting"]

R = TypeVar("R")
RECENT = 4096


class TopicWaiters:
    """Futures of polls waiting for a topic to change or a transaction to finish, woken
    from writer threads and request handlers. Use from the loop's thread, except the
    two listeners."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[TopicId, set[asyncio.Future[None]]] = {}
        self._held: dict[tuple[TopicId, int], set[asyncio.Future[None]]] = {}
        self._recent: dict[TopicId, tuple[deque[int], set[int]]] = {}

    def listener(self, topic: TopicId, version: int) -> None:
        """``MessagingService.add_listener``: on a writer thread."""
        if topic in self._waiting:  # read from a writer thread: a stale answer only costs a wake-up
            self._loop.call_soon_threadsafe(self._wake, topic)

    def finish_listener(self, topic: TopicId, write_pointers: Sequence[int]) -> None:
        """``MessagingService.add_finish_listener``: on any thread."""
        self._loop.call_soon_threadsafe(self.finished, topic, list(write_pointers))

    def _wake(self, topic: TopicId) -> None:
        for future in self._waiting.pop(topic, ()):
            if not future.done():
                future.set_result(None)

    def finished(self, topic: TopicId, write_pointers: Sequence[int]) -> int:
        """Wake the polls held behind these transactions; how many were woken."""
        order, known = self._recent.setdefault(topic, (deque(), set()))
        woken = 0
        for wp in write_pointers:
            if wp not in known:
                known.add(wp)
                order.append(wp)
                if len(order) > RECENT:
                    known.discard(order.popleft())
            for future in self._held.pop((topic, wp), ()):
                if not future.done():
                    future.set_result(None)
                    woken += 1
        return woken

    def recent(self, topic: TopicId, above: int, most: int = 256) -> list[int]:
        """The newest pointers above ``above`` reported finished for ``topic`` (at most
        ``most``)."""
        recent = self._recent.get(topic)
        if recent is None:
            return []
        found = []
        for wp in reversed(recent[0]):
            if wp > above:
                found.append(wp)
                if len(found) >= most:
                    break
        return found

    def register(self, topic: TopicId) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiting.setdefault(topic, set()).add(future)
        return future

    def discard(self, topic: TopicId, future: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(topic)
        if waiting is not None:
            waiting.discard(future)
            if not waiting:
                del self._waiting[topic]

    def register_held(self, topic: TopicId, write_pointer: int) -> asyncio.Future[None]:
        """A future done when ``write_pointer`` is reported finished (at once if it was)."""
        future: asyncio.Future[None] = self._loop.create_future()
        recent = self._recent.get(topic)
        if recent is not None and write_pointer in recent[1]:
            future.set_result(None)
        else:
            self._held.setdefault((topic, write_pointer), set()).add(future)
        return future

    def held(self) -> dict[int, list[TopicId]]:
        """The pointers polls are held behind now, each with its topics."""
        held: dict[int, list[TopicId]] = {}
        for topic, wp in self._held:
            held.setdefault(wp, []).append(topic)
        return held

    def discard_held(
        self, topic: TopicId, write_pointer: int, future: asyncio.Future[None]
    ) -> None:
        held = self._held.get((topic, write_pointer))
        if held is not None:
            held.discard(future)
            if not held:
                del self._held[(topic, write_pointer)]


class LongPoll:
    """Runs a poll's reads until there is something to answer (module docstring)."""

    def __init__(
        self,
        waiters: TopicWaiters,
        guard: WritePointerGuard,
        pool: Executor,
        *,
        recheck_s: float,
        watch_s: float | None = None,
        metrics: TmsMetrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``watch_s``: how often the watcher asks the manager while polls are held
        (None: no watcher; each poll asks every ``recheck_s`` only); ``metrics``: where
        each held wait's outcome is counted (``tms_held_waits_total``)."""
        self._waiters = waiters
        self._guard = guard
        self._pool = pool
        self._recheck_s = recheck_s
        self._watch_s = watch_s
        self._held_waits = None if metrics is None else metrics.held_waits
        self._monotonic = monotonic
        self._watcher: asyncio.Task[None] | None = None
        self._unwatchable = False  # the guard knows no manager: nobody to ask
        self.watch_rounds = 0
        """How often the watcher asked the manager (for tests and metrics)."""

    def close(self) -> None:
        """Stop the watcher (on the loop's thread)."""
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None

    def _watch(self) -> None:
        """Start the watcher unless it runs (a poll has just been held)."""
        if self._watch_s is None or self._unwatchable:
            return
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watching(self._watch_s))

    async def _watching(self, interval_s: float) -> None:
        """While polls are held: ask the manager, in one call, about every pointer held
        on, and wake the polls behind those that finished. It asks ``interval_s`` after
        a round in which a pointer finished or a new one was held on, and otherwise
        waits twice as long as the last time, up to ``recheck_s`` (polls held behind a
        long transaction cost next to nothing). Ends when no poll is held (a new hold
        starts it again), or for good when the guard has no manager; after a failed
        call it waits ``recheck_s`` (each poll answers "unknown" on its own recheck)."""
        loop = asyncio.get_running_loop()
        slowest = max(interval_s, self._recheck_s)
        pause = interval_s
        asked: set[int] = set()
        while True:
            await asyncio.sleep(pause)
            held = self._waiters.held()
            if not held:
                return
            self.watch_rounds += 1
            try:
                state = await loop.run_in_executor(self._pool, self._guard.state, sorted(held))
            except TmsError:
                pause = slowest
                continue
            if state is None:
                self._unwatchable = True
                return
            moved = not asked.issuperset(held)
            asked = set(held)
            for wp, topics in held.items():
                if wp not in state.in_progress and wp <= state.write_pointer:
                    moved = True
                    for topic in topics:
                        self._waiters.finished(topic, [wp])
            pause = interval_s if moved else min(pause * 2, slowest)

    def recent(self, topic: TopicId, above: int) -> list[int]:
        """``TopicWaiters.recent`` (on the loop's thread)."""
        return self._waiters.recent(topic, above)

    async def run(
        self,
        topic: TopicId,
        wait_ms: int,
        read: Callable[[], Awaitable[R]],
        outcome: Callable[[R], tuple[bool, int | None]],
        on_finished: Callable[[int], bool] | None = None,
    ) -> tuple[R, bool]:
        """Call ``read`` until it found something or ``wait_ms`` passed; ``outcome``
        says of a read (found something, the write pointer it is held behind). Returns
        the last read and whether the transaction it is held behind has finished. When
        that transaction finishes, ``on_finished`` (given its pointer; on the loop's
        thread) may say True: then ``read`` is called again (it reads what finished)."""
        deadline = self._monotonic() + wait_ms / 1000
        check_at: list[float] = []  # when to ask the manager next (set at the first hold)
        reread_after: int | None = None  # the pointer whose finish made it read again
        while True:
            # Register before reading, so a write landing after the read's snapshot is
            # guaranteed to wake us (its listener runs after the write).
            waiter = self._waiters.register(topic) if wait_ms else None
            try:
                result = await read()
                found, held = outcome(result)
                if found or waiter is None or self._monotonic() >= deadline:
                    return result, False
                if held is None:
                    remaining = deadline - self._monotonic()
                    try:
                        await asyncio.wait_for(asyncio.shield(waiter), remaining)
                    except TimeoutError:
                        return result, False
                    continue
                if not check_at:
                    check_at.append(self._monotonic() + self._recheck_s)
                if reread_after is not None and reread_after != held:
                    self._count("held_again")
                reread_after = None
                state = await self._wait_held(topic, held, waiter, deadline, check_at)
                self._count(state)
                if state == "finished" and on_finished is not None and on_finished(held):
                    reread_after = held
                    continue
                if state != "changed":
                    return result, state == "finished"
            finally:
                if waiter is not None:
                    self._waiters.discard(topic, waiter)

    def _count(self, outcome: str) -> None:
        if self._held_waits is not None:
            self._held_waits.labels(outcome).inc()

    async def _wait_held(
        self,
        topic: TopicId,
        wp: int,
        changed: asyncio.Future[None],
        deadline: float,
        check_at: list[float],
    ) -> str:
        """ "finished", "changed" (read again: a rollback may have freed the reader),
        "timeout", or "unknown" (no transaction manager to ask). ``check_at[0]``: when
        to ask the manager next, kept across the reads of one poll, so a topic that
        keeps changing (each change a new read) does not put the question off."""
        held = self._waiters.register_held(topic, wp)
        if not held.done():
            self._watch()
        try:
            while True:
                now = self._monotonic()
                if now >= deadline:
                    return "timeout"
                if now < check_at[0]:
                    done, _ = await asyncio.wait(
                        {changed, held},
                        timeout=min(deadline, check_at[0]) - now,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if held in done:
                        return "finished"
                    if changed in done:
                        return "changed"
                    if self._monotonic() >= deadline:
                        return "timeout"
                check_at[0] = self._monotonic() + self._recheck_s
                try:
                    state = await asyncio.get_running_loop().run_in_executor(
                        self._pool, self._guard.state, [wp]
                    )
                except TmsError:
                    return "unknown"
                if state is None:
                    return "unknown"
                if wp not in state.in_progress and wp <= state.write_pointer:
                    self._waiters.finished(topic, [wp])
                    return "finished"
        finally:
            self._waiters.discard_held(topic, wp, held)


async def receive_waiting(
    svc: MessagingService,
    waiters: TopicWaiters,
    request: ReceiveRequest,
    wait_ms: int,
    *,
    deadline: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> ReceiveResult:
    """Receive (``Receive`` submitted to the queue's group commit); when it leased
    nothing, wait up to ``wait_ms`` as the module docstring says and receive again.
    ``deadline`` (monotonic) drops the first receive if it is still queued then; the
    later ones have been served once, so waiting is not queueing. Cancelled while a
    receive is written, it returns what that receive leased, if anything (else it is
    cancelled): only waiting is cut short, never a lease its caller does not learn of."""
    topic = request.topic
    until = monotonic() + wait_ms / 1000
    while True:
        # Registered before the receive, so a message made ready after it wakes us.
        waiter = waiters.register(topic) if wait_ms else None
        try:
            # A receive is a write: once submitted it leases, cancelled or not, so the
            # caller gets what it leased; a cancellation ends only the waiting.
            result, cancelled = await svc.submit_shielded(Receive(request), deadline=deadline)
            deadline = None
            remaining = until - monotonic()
            if result.messages or waiter is None or remaining <= 0:
                return result
            if cancelled:
                raise asyncio.CancelledError
            if result.next_due_ms is not None:
                due_in = (result.next_due_ms - svc.now_ms()) / 1000
                remaining = min(remaining, max(due_in, 0.001))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, remaining)
        finally:
            if waiter is not None:
                waiters.discard(topic, waiter)
