"""The Thrift server: framed transport, binary protocol, one asyncio event loop.

Why an event loop rather than a thread per connection: every call must wait for its log
edit to be fsynced, and all edits queued together can share one fsync (group commit).
The loop decodes every request that arrived, applies each to the manager at once (a few
microseconds under the state lock) and parks its encoded reply; then, once per loop
iteration, it flushes the log itself — one write, one fdatasync for everything queued —
and releases every reply the flush covered. No thread blocks per call and no thread
hand-off is needed per flush. When another thread (the timeout or snapshot task) led a
flush, its sync listener wakes the loop.

With ``sync_helper`` (the default for a log on local files), the loop only *writes*
batches and helper processes (``txn.persist.syncer``, ``sync_helpers`` of them) run
their ``fdatasync``; the loop serves the calls that arrive meanwhile and writes them as
the next batch as soon as a helper is free, so up to ``sync_helpers`` syncs are in
flight (the disk completes concurrent syncs faster than the same syncs one after
another). When nothing is in flight, a batch of fewer than ``sync_helper_min_edits``
edits (few callers) is synced on the loop, which answers it sooner than two process
wake-ups would. Batches become durable in write order (``WriteAheadLog.finish_flush``),
so the log's order and "no reply before its edit is durable" are as before.

Commit delay (``commit_delay_us``, as PostgreSQL's ``commit_delay``): a flush waits, at
most that long after its first call was queued, for the connections answered within
that time to send their next call, so that clients in step share one flush instead of
alternating between two half-size ones. Connections quiet for longer are not waited for,
so a lone client never waits.

Per connection, replies leave in request order. Slow calls (``BLOCKING``: snapshot,
reset, prune) run on a worker thread and hold their place in that order; so do frames of
``offload_frame_bytes`` or more (a huge ``canCommit``), decoded and run there too, and the
connection's later frames wait for them (``txn.rpc.connection``).

With ``tls_cert``/``tls_key`` the server speaks TLS, and with ``tls_client_ca`` it
accepts only clients with a certificate that CA signed (``txn.rpc.tls``).

Robustness: a frame length <= 0 or above ``max_frame_bytes``, an undecodable message or
arguments, or a message that is not a call closes that connection only. An unknown
method gets ``TApplicationException(UNKNOWN_METHOD)``. A client that stops reading has
its reads paused until its replies drain. Unfinished frames share a memory budget, and
stalled frames and idle connections are closed after their timeouts (``txn.rpc.limits``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from thriftpy2.thrift import TApplicationException, TMessageType

from txms_common.loop import new_event_loop
from txn.config import ServerConfig
from txn.errors import TxError, TxStorageError
from txn.manager import ManagerState, TransactionManager
from txn.persist.syncer import HelperGoneError, SyncHelper
from txn.persist.wal import UnsyncedWrite
from txn.rpc.connection import Connection, Slot
from txn.rpc.fastpath import FastCalls
from txn.rpc.handler import BLOCKING, TephraHandler
from txn.rpc.idl import tephra
from txn.rpc.limits import FrameBudget
from txn.rpc.timer import LoopTimer
from txn.rpc.tls import server_context
from txn.rpc.wire import encode_message, parse_call, reading

__all__ = ["ServerThread", "ThriftServer"]

log = logging.getLogger(__name__)

_CALL = TMessageType.CALL
_ONEWAY = TMessageType.ONEWAY


@dataclass(frozen=True, slots=True)
class _Blocking:
    """A decoded call that must run on a worker thread."""

    api: str
    seqid: int
    args: Any


_Outcome = tuple[int, bytes] | _Blocking | str
"""What a frame came to: a reply slot (ticket, framed reply), a call for a worker, or
why the connection must close."""


class ThriftServer:
    """Serves a ``TephraHandler`` on one event loop (see the module docstring)."""

    def __init__(
        self,
        manager: TransactionManager,
        config: ServerConfig,
        handler: TephraHandler | None = None,
    ) -> None:
        self.manager = manager
        self.config = config
        self.handler = handler if handler is not None else TephraHandler(manager)
        self.connections: set[Connection] = set()
        self.waiting: set[Connection] = set()
        self.budget: FrameBudget[Connection] = FrameBudget(config.max_pending_frame_bytes)
        self._sweeper: asyncio.TimerHandle | None = None
        self._released_upto = -1  # the durable ticket of the last _release pass
        # Commit delay: connections fully answered -> when (time.monotonic(), not the
        # loop's clock: uvloop's counts milliseconds), oldest first; a new call of theirs
        # removes them. The batch's first look, and the delay's timer (set by start()).
        self.commit_delay_s = config.commit_delay_us / 1e6
        self.answered: dict[Connection, float] = {}
        self._batch_since: float | None = None
        self._delay_timer: LoopTimer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._wakeup_pending = False
        self._sync_scheduled = False
        self._loop_thread = 0
        self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="txn-rpc-worker")
        self._idle: list[SyncHelper] = []  # helpers without a request
        self._busy: dict[SyncHelper, UnsyncedWrite] = {}  # helper -> the flush it syncs
        self._methods = self.handler.methods
        self._fast = FastCalls(self.handler).table
        self._service = tephra.TTransactionServer
        self.address: tuple[str, int] = (config.host, config.port)

    @property
    def sync_helpers(self) -> int:
        """Sync helper processes serving (0: the loop syncs the log itself)."""
        return len(self._idle) + len(self._busy)

    async def start(self) -> tuple[str, int]:
        """Listen; return the bound (host, port)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self.commit_delay_s:
            self._delay_timer = LoopTimer(self._loop, self._sync_step)
        if self.manager.add_sync_listener(self._on_sync) and self.config.sync_helper:
            for _ in range(self.config.sync_helpers):
                helper = SyncHelper()
                self._loop.add_reader(helper.fileno(), self._helper_answered, helper)
                self._idle.append(helper)
        cfg = self.config
        tls = None
        if cfg.tls_cert is not None and cfg.tls_key is not None:
            tls = server_context(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca)
        self._server = await self._loop.create_server(
            lambda: Connection(self), cfg.host, cfg.port, reuse_address=True, ssl=tls
        )
        sockname = self._server.sockets[0].getsockname()
        self.address = (sockname[0], sockname[1])
        if self._sweep_period() is not None:
            self._sweeper = self._loop.call_later(self._sweep_period() or 1.0, self._sweep)
        return self.address

    def now(self) -> float:
        """The loop's clock (for the connection timeouts)."""
        assert self._loop is not None
        return self._loop.time()

    # -- limits (txn.rpc.limits) -------------------------------------------------------

    def release_budget(self, size: int) -> None:
        for conn, granted in self.budget.release(size):
            conn.granted(granted)

    def _sweep_period(self) -> float | None:
        timeouts = [t for t in (self.config.frame_timeout_s, self.config.idle_timeout_s) if t > 0]
        if not timeouts:
            return None
        return min(1.0, max(0.05, min(timeouts) / 4))

    def _sweep(self) -> None:
        """Close connections past their frame or idle timeout."""
        cfg = self.config
        now = self.now()
        for conn in list(self.connections):
            if conn.transport is None or conn.paused_by_server:
                continue
            since = conn.partial_since
            if since is not None and cfg.frame_timeout_s > 0:
                if now - since > cfg.frame_timeout_s:
                    conn.abort(f"a frame unfinished after {cfg.frame_timeout_s} s")
            elif (
                cfg.idle_timeout_s > 0
                and not conn.replies
                and now - conn.last_rx > cfg.idle_timeout_s
            ):
                conn.abort(f"idle for {cfg.idle_timeout_s} s")
        period = self._sweep_period()
        if period is not None and self._loop is not None:
            self._sweeper = self._loop.call_later(period, self._sweep)

    async def close(self) -> None:
        """Stop accepting, let in-flight calls finish (up to the drain timeout), close."""
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self.connections):
            conn.draining = True
            conn.pause("draining")
            conn.flush()
        deadline = asyncio.get_running_loop().time() + self.config.drain_timeout_s
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.abort("server stopping")
        if self._server is not None:
            await self._server.wait_closed()
        self._workers.shutdown(wait=True)
        if self._delay_timer is not None:
            self._delay_timer.close()
            self._delay_timer = None
        loop = asyncio.get_running_loop()
        idle, busy = self._idle, self._busy
        self._idle, self._busy = [], {}  # later flushes: on the loop itself
        for helper in [*idle, *busy]:
            loop.remove_reader(helper.fileno())
        for helper, write in busy.items():  # the connections went first; flushes must end
            failure = helper.result()
            if isinstance(failure, HelperGoneError):
                self._sync_here(write)
            else:
                self.manager.finish_flush(write, failure)
        for helper in [*idle, *busy]:
            helper.close()

    # -- durability ---------------------------------------------------------------------

    def schedule_sync(self) -> None:
        """Flush the log once this loop iteration's callbacks have run (coalesced)."""
        if not self._sync_scheduled and self._loop is not None:
            self._sync_scheduled = True
            self._loop.call_soon(self._sync_step)

    def _sync_step(self) -> None:
        self._sync_scheduled = False
        if self._delay_timer is not None and self._delaying(self._delay_timer):
            pass  # the timer or the awaited calls come back here
        elif self._idle or self._busy:
            self._start_flush()
        else:
            # None means another thread is flushing and will wake us; a failed log is
            # handled just below.
            with contextlib.suppress(TxError):
                self.manager.flush_log()
        self._release()

    def _delaying(self, timer: LoopTimer) -> bool:
        """Whether to hold the next flush back (see "Commit delay" in the module
        docstring): True while a connection answered less than the delay ago has not
        called again and the batch's first call has waited less than the delay."""
        now = time.monotonic()
        delay = self.commit_delay_s
        answered = self.answered
        quiet = []
        for conn, at in answered.items():  # oldest first
            if now - at < delay:
                break
            quiet.append(conn)
        for conn in quiet:  # quiet for a whole delay: not waited for
            del answered[conn]
        if answered and self.manager.has_unflushed():
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

    def _start_flush(self) -> None:
        """Write what is queued and hand its sync to a free helper (or sync it here)."""
        if not self._idle:
            return  # every helper is syncing: the first answer starts the next flush
        try:
            write = self.manager.start_flush()
        except TxError:
            return  # the log failed: _release() aborts the connections
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
        self.manager.finish_flush(write, failure)  # a failure fails the log

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
            self.manager.finish_flush(write, failure)
        self._release()
        if self.waiting:
            self._sync_step()  # what was queued meanwhile goes out at once

    def _lose_helper(self, helper: SyncHelper, reason: HelperGoneError) -> None:
        """Go on without ``helper`` (without any, the loop syncs the log itself)."""
        log.warning("%s; %d sync helpers left", reason, len(self._idle) + len(self._busy))
        if self._loop is not None:
            self._loop.remove_reader(helper.fileno())  # a dead helper stays readable
        helper.close()

    def _release(self) -> None:
        """Send every reply that is durable now; abort everything if the log failed."""
        if self.manager.state is ManagerState.FAILED:
            # What is parked will never be durable. Never answer OK for it.
            for conn in list(self.connections):
                conn.abort("the transaction log failed")
            return
        synced = self.manager.synced_ticket()
        if synced == self._released_upto:
            # Nothing became durable since the last pass, so no parked reply can go (a
            # reply waiting for a worker thread is sent when the worker fills it in).
            return
        self._released_upto = synced
        for conn in list(self.waiting):
            conn.flush()

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
        self._sync_step()  # releases what the other thread's flush covered

    # -- calls ------------------------------------------------------------------------

    def dispatch(self, conn: Connection, frame: bytes) -> bool:
        """Run one frame's call (or hand it to a worker); False if the connection was
        closed."""
        if len(frame) >= self.config.offload_frame_bytes and self._loop is not None:
            # Decoded and run on a worker; the connection's later frames wait for it.
            if not conn.reserved:
                self.budget.force(len(frame))
                conn.reserved = len(frame)
            conn.busy = True
            conn.pause("busy")
            slot = Slot(0, None)
            conn.replies.append(slot)
            self._loop.run_in_executor(self._workers, self._run_offloaded, conn, slot, frame)
            return True
        outcome = self._execute(frame, on_loop=True)
        if isinstance(outcome, str):
            conn.abort(outcome)
            return False
        if isinstance(outcome, _Blocking):
            slot = Slot(0, None)
            conn.replies.append(slot)
            assert self._loop is not None
            self._loop.run_in_executor(self._workers, self._run_blocking, conn, slot, outcome)
            return True
        conn.replies.append(Slot(*outcome))
        return True

    def _execute(self, frame: bytes, *, on_loop: bool) -> _Outcome:
        """Decode ``frame`` and run its call (a ``BLOCKING`` one only off the loop)."""
        call = parse_call(frame)
        if call is not None:
            fast = self._fast.get(call[0])
            if fast is not None:
                answer = fast(call[1], frame, call[2])
                if answer is not None:
                    return answer
        proto = reading(frame)
        try:
            api, mtype, seqid = proto.read_message_begin()
        except Exception as exc:
            return f"undecodable message header: {exc!r}"
        if mtype not in (_CALL, _ONEWAY):
            return f"message type {mtype} is not a call"
        if api not in self._methods:
            err = TApplicationException(
                TApplicationException.UNKNOWN_METHOD, f"Unknown function {api}"
            )
            return 0, encode_message(api, seqid, err)
        args = getattr(self._service, api + "_args")()
        try:
            proto.read_struct(args)
        except Exception as exc:
            return f"undecodable arguments of {api}: {exc!r}"
        if on_loop and api in BLOCKING:
            return _Blocking(api, seqid, args)
        reply = self.handler.handle(api, args)
        return reply.ticket, encode_message(api, seqid, reply.result)

    def _run_blocking(self, conn: Connection, slot: Slot, call: _Blocking) -> None:
        reply = self.handler.handle(call.api, call.args)
        self._fill(conn, slot, (reply.ticket, encode_message(call.api, call.seqid, reply.result)))

    def _run_offloaded(self, conn: Connection, slot: Slot, frame: bytes) -> None:
        try:
            outcome = self._execute(frame, on_loop=False)
        except BaseException as exc:  # never leave the connection busy for ever
            outcome = f"internal error: {exc!r}"
        self._fill(conn, slot, outcome, offloaded=True)

    def _fill(
        self, conn: Connection, slot: Slot, outcome: _Outcome, *, offloaded: bool = False
    ) -> None:
        """Hand a worker's outcome back to the loop thread."""
        assert self._loop is not None

        def fill() -> None:
            if isinstance(outcome, str):
                conn.abort(outcome)
            elif isinstance(outcome, tuple):
                slot.ticket, slot.data = outcome
                conn.flush()
            if offloaded:
                conn.call_done()
            if conn.replies:
                self.schedule_sync()

        self._loop.call_soon_threadsafe(fill)


class ServerThread:
    """Runs a ``ThriftServer`` on its own event-loop thread (tests, embedding)."""

    def __init__(self, server: ThriftServer) -> None:
        self.server = server
        self._loop = new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="txn-rpc-loop", daemon=True
        )

    def start(self) -> tuple[str, int]:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(timeout=30)

    def stop(self) -> None:
        """Close the server (draining in-flight calls) and stop the loop thread."""
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
