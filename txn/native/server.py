"""``NativeThriftServer``: the Thrift server of the native engine (``txn.native._core.Server``,
txn/native/src/server.c), with ``txn.rpc.server.ThriftServer``'s interface and behaviour.

One epoll loop in C, on a thread of its own, does the framing, the hot calls (start*,
``canCommitOrThrow``, ``commitOrThrow``: decoded, applied to the native state under the
manager's state lock, logged and answered without Python), the log's group commit (the
loop leads each flush itself, with the commit delay) and the release of replies in
request order once durable. Every other frame — other methods, other layouts, a hot call
that is not the plain success case — goes to the same ``txn.rpc.dispatch.Dispatcher`` the
Python server uses, so answers and error mapping are the same; ``BLOCKING`` calls and
frames of ``offload_frame_bytes`` or more run on worker threads. Limits, timeouts,
draining and a failed log behave as in the Python server (``txn.rpc.limits``).

Not supported: TLS (``new_server`` then serves the native engine with the Python server);
``sync_helper*`` settings do not apply (there is no helper process: a C loop syncs without
waiting for anyone's GIL).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from txms_common.clock import SystemClock
from txn.config import ClientIdRetention, ServerConfig
from txn.manager import DEFAULT_CLIENT_ID, ManagerState, TransactionManager
from txn.native._core import Server, StateLock
from txn.native.log import NativeLog
from txn.native.machine import NativeStateMachine
from txn.rpc.dispatch import Blocking, Dispatcher
from txn.rpc.handler import TephraHandler

__all__ = ["BudgetView", "NativeThriftServer", "unsupported"]

log = logging.getLogger(__name__)

_RETAIN = {ClientIdRetention.OFF: 0, ClientIdRetention.ACTIVE: 1, ClientIdRetention.COMMITTED: 2}


@dataclass(frozen=True, slots=True)
class BudgetView:
    used: int
    waiting: int


def unsupported(config: ServerConfig) -> str | None:
    """What ``config`` asks for that this server does not do, or None."""
    if config.tls_cert is not None or config.tls_key is not None:
        return "TLS"
    return None


class NativeThriftServer:
    """See the module docstring."""

    def __init__(
        self,
        manager: TransactionManager,
        config: ServerConfig,
        handler: TephraHandler | None = None,
    ) -> None:
        missing = unsupported(config)
        if missing is not None:
            raise ValueError(f"the native server does not do {missing}")
        self.manager = manager
        self.config = config
        self.handler = handler if handler is not None else TephraHandler(manager)
        self.dispatcher = Dispatcher(self.handler)
        self.address: tuple[str, int] = (config.host, config.port)
        self.sync_helpers = 0
        self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="txn-rpc-worker")
        self._core: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def budget(self) -> BudgetView:
        """The frame budget now (``txn.rpc.limits.FrameBudget``'s ``used`` and
        ``waiting``), read from the loop's thread's last state."""
        used, waiting = self._core.budget if self._core is not None else (0, 0)
        return BudgetView(used, waiting)

    @property
    def core(self) -> Server | None:
        """The C server once started (its ``stats``: calls answered in C and in Python)."""
        return self._core

    async def start(self) -> tuple[str, int]:
        """Listen; return the bound (host, port)."""
        machine, durable_log = self.manager.machine, self.manager.log
        lock = self.manager.state_lock
        if (
            not isinstance(machine, NativeStateMachine)
            or not isinstance(durable_log, NativeLog)
            or not isinstance(lock, StateLock)
        ):
            raise TypeError("the native server needs a manager on the native engine")
        host, port = self.config.host, self.config.port
        family, kind, proto, _name, where = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(where)
            sock.listen(100)
            bound = sock.getsockname()
            self.address = (bound[0], bound[1])
            self._core = Server(
                sock.fileno(),
                machine.core,
                durable_log.core,
                lock,
                _clock(self.manager),
                self._dispatch,
                _closed,
                self._settings(),
            )
        except BaseException:
            sock.close()
            raise
        sock.detach()  # the C server owns the descriptor now
        self.manager.watch_state(self._mirror)
        self._thread = threading.Thread(target=self._serve, name="txn-native-loop", daemon=True)
        self._thread.start()
        return self.address

    async def close(self) -> None:
        """Stop accepting, let in-flight calls finish (up to the drain timeout), close."""
        if self._core is not None and self._thread is not None:
            self._core.stop()
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
            self.manager.unwatch_state(self._mirror)
        self._workers.shutdown(wait=True)

    def _serve(self) -> None:
        assert self._core is not None
        try:
            self._core.serve()
        except BaseException:
            log.exception("the native Thrift server's loop failed")
        rounds, syncing, fanning, gathering = self._core.rounds
        if rounds:
            log.info(
                "group commit: %d flush rounds, per round %.0f µs syncing, %.0f µs handing out "
                "the replies, %.0f µs gathering the next calls",
                rounds, syncing / rounds * 1e6, fanning / rounds * 1e6, gathering / rounds * 1e6,
            )  # fmt: skip

    def _settings(self) -> dict[str, Any]:
        tx, server = self.manager.config, self.config
        return {
            "default_timeout_s": tx.default_timeout_s,
            "long_timeout_s": tx.long_timeout_s,
            "max_timeout_s": tx.max_timeout_s,
            "changeset_count_limit": tx.changeset_count_limit,
            "changeset_count_warn": tx.changeset_count_warn,
            "changeset_size_limit": tx.changeset_size_limit,
            "changeset_size_warn": tx.changeset_size_warn,
            "retain_client_id": _RETAIN[tx.retain_client_id],
            "default_client": DEFAULT_CLIENT_ID,
            "max_frame_bytes": server.max_frame_bytes,
            "offload_frame_bytes": server.offload_frame_bytes,
            "max_pending_frame_bytes": server.max_pending_frame_bytes,
            "commit_delay_us": server.commit_delay_us,
            "send_thread": int(server.send_thread),
            "drain_timeout_s": float(server.drain_timeout_s),
            "frame_timeout_s": float(server.frame_timeout_s),
            "idle_timeout_s": float(server.idle_timeout_s),
        }

    def _mirror(self, state: ManagerState) -> None:
        """The manager's state into the C server: 0 running, 2 failed (abort everything),
        1 otherwise (the hot path stands aside; the generic path answers as the manager
        says). Called by the manager on each transition."""
        assert self._core is not None
        if state is ManagerState.RUNNING:
            self._core.set_state(0)
        else:
            self._core.set_state(2 if state is ManagerState.FAILED else 1)

    # -- called by the C loop (its thread, with the GIL) ---------------------------------

    def _dispatch(
        self, frame: bytes, conn_id: int, slot: int, offload: bool
    ) -> tuple[int, bytes] | str | bool:
        """A frame the C path left: answered now, later (False: a worker completes it),
        or the connection closes (a str: why)."""
        if offload:
            self._workers.submit(self._offloaded, frame, conn_id, slot)
            return False
        outcome = self.dispatcher.execute(frame, on_loop=True)
        if isinstance(outcome, Blocking):
            self._workers.submit(self._blocking, outcome, conn_id, slot)
            return False
        return outcome

    # -- worker threads -----------------------------------------------------------------

    def _blocking(self, call: Blocking, conn_id: int, slot: int) -> None:
        ticket, data = self.dispatcher.run_blocking(call)
        assert self._core is not None
        self._core.complete(conn_id, slot, ticket, data)

    def _offloaded(self, frame: bytes, conn_id: int, slot: int) -> None:
        outcome = self.dispatcher.run_offloaded(frame)
        assert self._core is not None
        if isinstance(outcome, str):
            _closed(outcome)
            self._core.complete(conn_id, slot, 0, outcome)
        else:
            self._core.complete(conn_id, slot, *outcome)


def _clock(manager: TransactionManager) -> Callable[[], int] | None:
    """The manager's clock for the C server: None (read in C) for the wall clock."""
    clock = manager.clock
    return None if type(clock) is SystemClock else clock.now_ms


def _closed(reason: str) -> None:
    log.info("closing a Thrift connection: %s", reason)
