"""The Thrift server: framed transport, binary protocol, one asyncio event loop.

Why an event loop rather than a thread per connection: every call must wait for its log
edit to be fsynced, and all edits queued together can share one fsync (group commit).
The loop decodes every request that arrived, applies each to the manager at once (a few
microseconds under the state lock) and parks its encoded reply; then, once per loop
iteration, the log is flushed — one write, one fdatasync for everything queued — and
every reply the flush covered is released. Three pieces, each in its own module:

* ``txn.rpc.connection``: framing, the reply queue, the per-connection limits;
* ``txn.rpc.dispatch``: a frame in, its call's outcome out;
* ``txn.rpc.group_commit``: when and where the log is flushed and synced (commit delay,
  sync helper processes) and when replies are released.

This module accepts connections (TLS with ``tls_cert``/``tls_key``, client certificates
with ``tls_client_ca``: ``txn.rpc.tls``), runs ``BLOCKING`` calls (snapshot, reset,
prune) and frames of ``offload_frame_bytes`` or more on worker threads — each holds its
place in the connection's reply order; after an offloaded frame the connection's later
frames wait for it — keeps the frame budget and sweeps the frame and idle timeouts
(``txn.rpc.limits``), and drains on close. ``new_server`` picks this server or the native
one (``txn.native.server``) for a manager.

Robustness: a frame length <= 0 or above ``max_frame_bytes``, an undecodable message or
arguments, or a message that is not a call closes that connection only. An unknown
method gets ``TApplicationException(UNKNOWN_METHOD)``. A client that stops reading has
its reads paused until its replies drain. If the log or the manager fails, every
connection is closed without answering what the log never made durable.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from txms_common.loop import new_event_loop
from txn.config import ServerConfig
from txn.manager import ManagerState, TransactionManager
from txn.rpc.connection import Connection, Slot
from txn.rpc.dispatch import Blocking, Dispatcher
from txn.rpc.group_commit import LoopGroupCommit
from txn.rpc.handler import TephraHandler
from txn.rpc.limits import FrameBudget
from txn.rpc.tls import server_context

__all__ = ["ServerThread", "ThriftServer", "TxServer", "new_server"]

log = logging.getLogger(__name__)


class TxServer(Protocol):
    """What serving code needs of a Thrift server (``ThriftServer`` and
    ``txn.native.server.NativeThriftServer``)."""

    address: tuple[str, int]

    async def start(self) -> tuple[str, int]:
        """Listen; return the bound (host, port)."""
        ...

    async def close(self) -> None:
        """Stop accepting, let in-flight calls finish (up to the drain timeout), close."""


def new_server(
    manager: TransactionManager, config: ServerConfig, handler: TephraHandler | None = None
) -> TxServer:
    """The server for ``manager``: the native one when the manager runs on the native
    engine and the configuration asks for nothing it lacks (TLS), else this one (which
    serves either engine)."""
    if manager.engine.native:
        from txn.native.server import NativeThriftServer, unsupported  # noqa: PLC0415

        missing = unsupported(config)
        if missing is None:
            return NativeThriftServer(manager, config, handler)
        log.info("the native server does not do %s: serving with the Python server", missing)
    return ThriftServer(manager, config, handler)


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
        self.dispatcher = Dispatcher(self.handler)
        self.group_commit = LoopGroupCommit(manager.log, config, self._release)
        self.connections: set[Connection] = set()
        self.waiting: set[Connection] = set()
        self.budget: FrameBudget[Connection] = FrameBudget(config.max_pending_frame_bytes)
        self._sweeper: asyncio.TimerHandle | None = None
        self._released_upto = -1  # the durable ticket of the last _release pass
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="txn-rpc-worker")
        self.address: tuple[str, int] = (config.host, config.port)

    @property
    def sync_helpers(self) -> int:
        """Sync helper processes serving (0: the loop syncs the log itself)."""
        return self.group_commit.helpers

    async def start(self) -> tuple[str, int]:
        """Listen; return the bound (host, port)."""
        self._loop = asyncio.get_running_loop()
        self.group_commit.start(self._loop)
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
        self.group_commit.close()

    # -- releasing replies ------------------------------------------------------------

    def _release(self, synced: int) -> None:
        """Send every reply that is durable now; abort everything if the log failed."""
        if self.manager.state is ManagerState.FAILED or self.manager.log.failure is not None:
            # What is parked will never be durable. Never answer OK for it.
            for conn in list(self.connections):
                conn.abort("the transaction log failed")
            return
        if synced == self._released_upto:
            # Nothing became durable since the last pass, so no parked reply can go (a
            # reply waiting for a worker thread is sent when the worker fills it in).
            return
        self._released_upto = synced
        for conn in list(self.waiting):
            conn.flush()

    # -- calls ------------------------------------------------------------------------

    def dispatch(self, conn: Connection, frame: bytes) -> bool:
        """Run one frame's call (or hand it to a worker); False if the connection was
        closed."""
        assert self._loop is not None
        if len(frame) >= self.config.offload_frame_bytes:
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
        outcome = self.dispatcher.execute(frame, on_loop=True)
        if isinstance(outcome, str):
            conn.abort(outcome)
            return False
        if isinstance(outcome, Blocking):
            slot = Slot(0, None)
            conn.replies.append(slot)
            self._loop.run_in_executor(self._workers, self._run_blocking, conn, slot, outcome)
            return True
        conn.replies.append(Slot(*outcome))
        return True

    def _run_blocking(self, conn: Connection, slot: Slot, call: Blocking) -> None:
        self._fill(conn, slot, self.dispatcher.run_blocking(call))

    def _run_offloaded(self, conn: Connection, slot: Slot, frame: bytes) -> None:
        self._fill(conn, slot, self.dispatcher.run_offloaded(frame), offloaded=True)

    def _fill(
        self,
        conn: Connection,
        slot: Slot,
        outcome: tuple[int, bytes] | str,
        *,
        offloaded: bool = False,
    ) -> None:
        """Hand a worker's outcome back to the loop thread."""
        assert self._loop is not None

        def fill() -> None:
            if isinstance(outcome, str):
                conn.abort(outcome)
            else:
                slot.ticket, slot.data = outcome
                conn.flush()
            if offloaded:
                conn.call_done()
            if conn.replies:
                self.group_commit.request()

        self._loop.call_soon_threadsafe(fill)


class ServerThread:
    """Runs a server (``ThriftServer`` or the native one) on its own event-loop thread
    (tests, embedding)."""

    def __init__(self, server: TxServer) -> None:
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
