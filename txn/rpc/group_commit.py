"""``LoopGroupCommit``: the Python Thrift server's end of the durable pipeline
(``txn.durability``) — when to flush the log on the event loop, where to sync it, and when
to release the replies a flush made durable.

Contract with the server:

* ``request()``: a reply waits for its ticket; the log is flushed once this loop
  iteration's callbacks have run (coalesced: one flush for everything queued);
* ``called(key)`` / ``answered(key)`` / ``forget(key)``: the commit delay's view of the
  clients (below) — ``key`` sent a call, got all its replies, went away;
* the server's ``release(synced)`` callback runs on the loop after each step (and when a
  flush another thread led ended): it sends every reply the durable ticket covers, and
  decides what a failed log or manager means (abort everything).

Flushing: each step writes everything queued as one batch and syncs it. With
``sync_helper`` and a log that can split a flush (``WriteAheadLog.start_flush``), the loop
only *writes* batches and helper processes (``txn.persist.syncer``, ``sync_helpers`` of
them) run their ``fdatasync``; the loop serves the calls that arrive meanwhile and writes
them as the next batch as soon as a helper is free, so up to ``sync_helpers`` syncs are in
flight. With nothing in flight, a batch of fewer than ``sync_helper_min_edits`` edits (few
callers) is synced on the loop, which answers it sooner than two process wake-ups would.
Batches become durable in write order (``WriteAheadLog.finish_flush``). Any other log is
flushed on the loop (``DurableLog.flush``).

Commit delay (``commit_delay_us``, as PostgreSQL's ``commit_delay``): a flush waits, at
most that long after its first call was queued, for the connections answered within that
time to send their next call, so that clients in step share one flush instead of
alternating between two half-size ones. Connections quiet for longer are not waited for,
so a lone client never waits. The delay keeps ``time.monotonic()`` and waits on a
``LoopTimer`` (uvloop's own clock counts milliseconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable

from txn.config import ServerConfig
from txn.durability import DurableLog
from txn.errors import TxError, TxStorageError
from txn.persist.syncer import HelperGoneError, SyncHelper
from txn.persist.wal import UnsyncedWrite, WriteAheadLog
from txn.rpc.timer import LoopTimer

__all__ = ["LoopGroupCommit"]

log = logging.getLogger(__name__)


class LoopGroupCommit:
    """See the module docstring. Use from the loop's thread (``start`` on it)."""

    def __init__(
        self, durable_log: DurableLog, config: ServerConfig, release: Callable[[int], None]
    ) -> None:
        self._log = durable_log
        self.config = config
        self._release = release
        self.delay_s = config.commit_delay_us / 1e6
        # Connections fully answered -> when, oldest first; a new call of theirs removes
        # them. The batch's first look, and the delay's timer (set by start()).
        self._answered: dict[Hashable, float] = {}
        self._batch_since: float | None = None
        self._timer: LoopTimer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._scheduled = False
        self._wakeup_pending = False
        self._idle: list[SyncHelper] = []  # helpers without a request
        self._busy: dict[SyncHelper, UnsyncedWrite] = {}  # helper -> the flush it syncs

    @property
    def helpers(self) -> int:
        """Sync helper processes serving (0: the loop syncs the log itself)."""
        return len(self._idle) + len(self._busy)

    @property
    def synced(self) -> int:
        return self._log.synced

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop it runs on, once started."""
        return self._loop

    @property
    def idle_helpers(self) -> tuple[SyncHelper, ...]:
        return tuple(self._idle)

    def replace_helpers(self, helpers: list[SyncHelper]) -> None:
        """Serve with ``helpers`` (used first to last) instead of the idle ones, which are
        closed: fault injection in tests. Call on the loop, with nothing in flight."""
        assert self._loop is not None and not self._busy
        for helper in self._idle:
            self._loop.remove_reader(helper.fileno())
            helper.close()
        for helper in helpers:
            self._loop.add_reader(helper.fileno(), self._helper_answered, helper)
        self._idle = list(reversed(helpers))

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        if self.delay_s:
            self._timer = LoopTimer(loop, self._step)
        self._log.add_listener(self._on_sync)
        if self.config.sync_helper and isinstance(self._log, WriteAheadLog):
            for _ in range(self.config.sync_helpers):
                helper = SyncHelper()
                loop.add_reader(helper.fileno(), self._helper_answered, helper)
                self._idle.append(helper)

    def close(self) -> None:
        """Stop the timer and the helpers; flushes still in flight end first."""
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self._log.remove_listener(self._on_sync)
        idle, busy = self._idle, self._busy
        self._idle, self._busy = [], {}  # later flushes: on the loop itself
        for helper in [*idle, *busy]:
            if self._loop is not None:
                self._loop.remove_reader(helper.fileno())
        for helper, write in busy.items():  # the connections went first; flushes must end
            failure = helper.result()
            if isinstance(failure, HelperGoneError):
                self._sync_here(write)
            else:
                self._split_log().finish_flush(write, failure)
        for helper in [*idle, *busy]:
            helper.close()

    # -- the commit delay's view of the clients -------------------------------------------

    def called(self, key: Hashable) -> None:
        self._answered.pop(key, None)

    def answered(self, key: Hashable) -> None:
        if self.delay_s:
            self._answered.pop(key, None)  # keep the dict in answer order
            self._answered[key] = time.monotonic()

    def forget(self, key: Hashable) -> None:
        self._answered.pop(key, None)

    def age_answers(self, seconds: float) -> None:
        """Make every recorded answer ``seconds`` older: how tests let time pass. Call on
        the loop."""
        for key in self._answered:
            self._answered[key] -= seconds

    # -- flushing --------------------------------------------------------------------------

    def request(self) -> None:
        """Flush once this loop iteration's callbacks have run (coalesced)."""
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._step)

    def _step(self) -> None:
        self._scheduled = False
        if self._timer is not None and self._delaying(self._timer):
            pass  # the timer or the awaited calls come back here
        elif self._idle or self._busy:
            self._start_flush()
        else:
            # None means another thread is flushing and will wake us; a failed log is
            # the release callback's to handle.
            with contextlib.suppress(TxError):
                self._log.flush()
        self._release(self._log.synced)

    def _delaying(self, timer: LoopTimer) -> bool:
        """True while a connection answered less than the delay ago has not called again
        and the batch's first call has waited less than the delay."""
        now = time.monotonic()
        delay = self.delay_s
        answered = self._answered
        quiet = []
        for key, at in answered.items():  # oldest first
            if now - at < delay:
                break
            quiet.append(key)
        for key in quiet:  # quiet for a whole delay: not waited for
            del answered[key]
        if answered and self._log.has_pending:
            if self._batch_since is None:
                self._batch_since = now
            deadline = self._batch_since + delay
            if now < deadline:
                if not timer.armed:
                    timer.arm(deadline)
                return True
        self._batch_since = None
        if timer.armed:
            timer.cancel()  # the batch goes now: no wake-up at its old deadline
        return False

    def _split_log(self) -> WriteAheadLog:
        assert isinstance(self._log, WriteAheadLog)
        return self._log

    def _start_flush(self) -> None:
        """Write what is queued and hand its sync to a free helper (or sync it here)."""
        if not self._idle:
            return  # every helper is syncing: the first answer starts the next flush
        try:
            write = self._split_log().start_flush()
        except TxError:
            return  # the log failed: the release callback aborts the connections
        if write is None:
            return  # nothing queued, or another thread is flushing and will wake us
        fd = write.writer.fileno()
        # With nothing in flight, a small batch means few callers: syncing it here
        # answers them sooner than two process wake-ups would. A memory log has no
        # descriptor to hand over.
        if fd is not None and (self._busy or write.edits >= self.config.sync_helper_min_edits):
            helper = self._idle.pop()
            try:
                helper.request(fd)
            except HelperGoneError as exc:
                self._lose_helper(helper, exc)
            else:
                self._busy[helper] = write
                return
        self._sync_here(write)

    def _sync_here(self, write: UnsyncedWrite) -> None:
        failure: TxStorageError | None = None
        try:
            write.writer.sync()
        except TxStorageError as exc:
            failure = exc
        self._split_log().finish_flush(write, failure)  # a failure fails the log

    def _helper_answered(self, helper: SyncHelper) -> None:
        """A helper's socket is readable: a sync's answer, or the helper is gone."""
        write = self._busy.pop(helper, None)
        failure = helper.result()
        if write is None or isinstance(failure, HelperGoneError):
            # An idle helper only speaks when it dies.
            if helper in self._idle:
                self._idle.remove(helper)
            if not isinstance(failure, HelperGoneError):
                failure = HelperGoneError("the sync helper answered a request it never got")
            self._lose_helper(helper, failure)
            if write is not None:
                self._sync_here(write)  # whether the helper synced it is unknown
        else:
            self._idle.append(helper)
            self._split_log().finish_flush(write, failure)
        self._release(self._log.synced)
        if self._log.has_pending:
            self._step()  # what was queued meanwhile goes out at once

    def _lose_helper(self, helper: SyncHelper, reason: HelperGoneError) -> None:
        """Go on without ``helper`` (without any, the loop syncs the log itself)."""
        log.warning("%s; %d sync helpers left", reason, self.helpers)
        if self._loop is not None:
            self._loop.remove_reader(helper.fileno())  # a dead helper stays readable
        helper.close()

    def _on_sync(self, ticket: int, failure: BaseException | None) -> None:
        """A flush finished (on any thread)."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread or self._wakeup_pending:
            return  # the loop releases replies after its own flushes
        self._wakeup_pending = True
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(self._wake_from_thread)

    def _wake_from_thread(self) -> None:
        self._wakeup_pending = False
        self._step()  # releases what the other thread's flush covered
