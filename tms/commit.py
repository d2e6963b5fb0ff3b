"""``GroupCommit``: many callers' items, processed in batches, one batch at a time.

Callers queue items; whoever finds no batch running *leads*: it takes everything queued
so far and hands it to ``process`` as one batch (one synced write), and whatever is
queued meanwhile is the next batch. So concurrent callers share one write, and each
batch is exactly what waited while the previous one was written — the only place that
decides what goes into a batch.

Two kinds of caller, without a thread hand-off per call:

* a thread (``run``) blocks until its items are processed; when no batch is running it
  processes one itself, on its own thread;
* an event loop (``submit``) gets a future and never blocks; when no batch is running,
  one is started on ``executor`` at the end of the loop's current turn, so calls made in
  the same turn go out together.

After each batch the lead passes on: to a thread waiting in the queue, else back to the
executor, so no caller's thread works on other callers' batches after its own, and the
group commits of many topics share the executor's threads batch by batch (one hand-off
per batch, never one per call).

``process(items)`` sets each item's outcome on the item; it should not raise. If it does
(a bug, an interrupt), the leader's own call raises that exception and every other call
of the batch fails with ``failed(exception)`` (by default the exception itself). The
next leader is woken before the callers of the finished batch, so the next write starts
as early as it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Call(Generic[T]):
    """One caller's items: woken through ``wake`` (a thread) or ``future`` (a loop)."""

    __slots__ = ("done", "error", "future", "items", "loop", "wake")

    def __init__(
        self,
        items: Sequence[T],
        wake: threading.Lock | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[None] | None = None,
    ) -> None:
        self.items = items
        self.wake = wake
        self.loop = loop
        self.future = future
        self.done = False
        self.error: BaseException | None = None


class GroupCommit(Generic[T]):
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        process: Callable[[list[T]], None],
        *,
        executor: Executor | None = None,
        failed: Callable[[BaseException], BaseException] = lambda exc: exc,
    ) -> None:
        """``executor`` runs leaders for ``submit``; without one only ``run`` is possible."""
        self._process = process
        self._executor = executor
        self._failed = failed
        self._lock = threading.Lock()
        self._queue: list[_Call[T]] = []
        self._leading = False  # a thread or a worker is processing batches
        self._starting: asyncio.AbstractEventLoop | None = None  # a worker start is due there

    def run(self, items: Sequence[T]) -> None:
        """Process ``items`` in a batch; return once it is done (see the module docstring)."""
        wake = threading.Lock()
        wake.acquire()  # released when the call is done, or must lead
        call = _Call(items, wake=wake)
        with self._lock:
            self._queue.append(call)
            lead = not self._leading
            self._leading = True
        if not lead:
            wake.acquire()
        if not call.done:
            self._lead(own=call)
        if call.error is not None:
            raise call.error

    def submit(self, items: Sequence[T], loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """Queue ``items`` from ``loop``'s thread; the future resolves once they are
        processed (see the module docstring)."""
        if self._executor is None:
            raise RuntimeError("this group commit has no executor for event-loop callers")
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append(_Call(items, loop=loop, future=future))
            start = not self._leading and (self._starting is None or self._starting.is_closed())
            if start:
                self._starting = loop
        if start:
            loop.call_soon(self._start_worker)  # after the calls of this turn joined
        return future

    def _start_worker(self) -> None:
        with self._lock:
            self._starting = None
            if self._leading or not self._queue:  # a thread took the lead meanwhile
                return
            self._leading = True
        self._executor_lead()

    def _executor_lead(self) -> None:
        if self._executor is None:  # only threads call: one of them leads
            raise AssertionError("event-loop calls queued without an executor")
        try:
            self._executor.submit(self._lead)
        except RuntimeError as exc:  # the executor was shut down
            self._no_worker(exc)

    def _no_worker(self, error: BaseException) -> None:
        """No worker could be started: a waiting thread leads, else the queue fails (with
        ``failed(error)``)."""
        with self._lock:
            thread = next((c for c in self._queue if c.wake is not None), None)
            failed: list[_Call[T]] = []
            if thread is None:
                failed, self._queue, self._leading = self._queue, [], False
        if thread is not None and thread.wake is not None:
            thread.wake.release()
            return
        for call in failed:
            call.error = self._failed(error)
        self._finish(failed)

    def _lead(self, own: _Call[T] | None = None) -> None:
        """Process one batch (with the leading thread's ``own`` call, if it is one), then
        pass the lead on (see the module docstring)."""
        with self._lock:
            batch, self._queue = self._queue, []
        items = [item for call in batch for item in call.items]
        try:
            self._process(items)
        except BaseException as exc:
            log.exception("a group commit batch failed")
            for call in batch:
                call.error = exc if call is own else self._failed(exc)
        successor: _Call[T] | None = None
        with self._lock:
            if self._queue:
                successor = next((c for c in self._queue if c.wake is not None), None)
            else:
                self._leading = False
            need_worker = self._leading and successor is None
        if successor is not None and successor.wake is not None:
            successor.wake.release()  # first: it starts the next batch at once
        elif need_worker:
            self._executor_lead()
        self._finish(batch)

    @staticmethod
    def _finish(batch: list[_Call[T]]) -> None:
        """Wake the callers of a processed batch (a thread's own call is not waiting)."""
        settled: dict[asyncio.AbstractEventLoop, list[_Call[T]]] = {}
        for call in batch:
            call.done = True
            if call.wake is not None:
                if call.wake.locked():
                    call.wake.release()
            elif call.loop is not None:
                settled.setdefault(call.loop, []).append(call)
        for loop, calls in settled.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_settle, calls)


def _settle(calls: list[_Call[T]]) -> None:
    for call in calls:
        future = call.future
        if future is None or future.done():  # the caller went away
            continue
        if call.error is not None:
            future.set_exception(call.error)
        else:
            future.set_result(None)
