"""``ElectedServer``: a transaction server that serves only while ZooKeeper elects it.

Lifecycle, in rounds, until ``stop()``:

1. Open a ZooKeeper session and contend in ``<base>/election`` (kazoo's election
   recipe: the oldest ephemeral sequential node leads). A standby waits here.
2. Elected: open the shared state in PostgreSQL, which takes a **new epoch** and so
   deposes any earlier leader at the storage (``txn.persist.postgres``); recover the
   newest snapshot and the logs since; start the Thrift server; publish its address in
   the ephemeral ``<base>/leader`` node.
3. Serve until one of: the ZooKeeper session is lost (``LOST``), or the connection has
   been ``SUSPENDED`` for a whole session timeout (the ensemble has surely expired the
   session by then, and a standby may lead); the manager failed (its log failed — for
   instance because a newer leader fenced it); ``stop()``.
4. Step down at once: close the listening socket and every connection (no reply that
   was not durable is ever sent), stop the manager, leave the election, close the
   session; then start the next round as a standby (unless stopping).

A short ``SUSPENDED`` (the client moving to another ZooKeeper node) does not cost the
leadership: the session survives it, and a leader that was in fact replaced can append
nothing anyway (fencing). The server always runs the Python write-ahead-log pipeline:
the state has no local file for a helper process (or a compiled path) to sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError

from txms_common.loop import new_event_loop
from txn.config import ServerConfig, TxConfig
from txn.errors import TxError
from txn.ha.zk import ZkTarget, session, translated
from txn.manager import ManagerState, TransactionManager
from txn.persist.postgres import PostgresStorage
from txn.persist.store import TransactionStateStore
from txn.rpc.server import new_server

__all__ = ["ElectedServer", "HaConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HaConfig:
    """Where the election and the shared state are."""

    zookeeper: ZkTarget
    state_url: str
    session_timeout_s: float = 10.0
    """ZooKeeper session timeout: how long a dead leader blocks a failover (ZooKeeper
    grants 2 to 20 ticks; the ensemble's tickTime bounds it)."""
    identifier: str = ""
    """This server's name in the election and in the ``txn_leader`` row."""
    advertise: str | None = None
    """The host published for clients (default: the bind host)."""
    retry_pause_s: float = 1.0
    """Pause before contending again after a round that failed."""


class ElectedServer:
    """See the module docstring. ``run()`` blocks; ``stop()`` may be called from any
    thread (or a signal handler's ``call_soon_threadsafe``)."""

    def __init__(
        self,
        ha: HaConfig,
        config: TxConfig,
        server_config: ServerConfig,
        *,
        on_serving: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.ha = ha
        self.config = config
        # No local log file: the loop syncs through the storage (one commit per batch).
        # A step-down lets calls in flight finish for at most a second.
        self.server_config = replace(
            server_config,
            sync_helper=False,
            drain_timeout_s=min(server_config.drain_timeout_s, 1.0),
        )
        self._on_serving = on_serving
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._step_down: Callable[[], None] | None = None
        self._suspended_at: float | None = None
        self.terms = 0

    # -- control ----------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()
        self._end_term("stopping")

    def _end_term(self, why: str) -> None:
        with self._lock:
            step_down = self._step_down
        if step_down is not None:
            log.warning("stepping down: %s", why)
            step_down()

    def _on_state(self, state: str) -> None:
        """kazoo's connection listener (on kazoo's thread: must not block)."""
        if state == KazooState.LOST:
            self._suspended_at = None
            self._end_term("the ZooKeeper session was lost")
        elif state == KazooState.SUSPENDED:
            self._suspended_at = time.monotonic()
            log.warning("ZooKeeper connection suspended; the session may still be alive")
        else:
            self._suspended_at = None

    # -- rounds -----------------------------------------------------------------------

    def run(self) -> int:
        """Contend, serve, step down, contend again... until ``stop()``. Returns 0."""
        while not self._stopping.is_set():
            try:
                self._round()
            except TxError as exc:
                log.error("transaction service round failed: %s", exc)
            if not self._stopping.wait(self.ha.retry_pause_s):
                log.info("contending for leadership again")
        return 0

    def _round(self) -> None:
        client = session(self.ha.zookeeper, self.ha.session_timeout_s)
        client.add_listener(self._on_state)
        election = client.Election(self.ha.zookeeper.election_path, self.ha.identifier)
        round_over = threading.Event()
        watcher = threading.Thread(
            target=self._cancel_when_needed,
            args=(election, round_over),
            name="txn-ha-watch",
            daemon=True,
        )
        watcher.start()
        try:
            log.info("standing by for leadership in %s", self.ha.zookeeper.url)
            with translated("contend for leadership"):
                election.run(self._lead, client)
        finally:
            round_over.set()
            watcher.join()
            with contextlib.suppress(Exception):
                election.cancel()
            client.remove_listener(self._on_state)
            with contextlib.suppress(Exception):
                client.stop()
            client.close()
            self._suspended_at = None

    def _cancel_when_needed(self, election: object, round_over: threading.Event) -> None:
        """Leave the election (as a standby) or step down (as leader) once stopping, or
        after a suspension as long as a session; return when the round is over."""
        while not round_over.wait(0.1):
            if self._stopping.is_set():
                break
            since = self._suspended_at
            if since is not None and time.monotonic() - since >= self.ha.session_timeout_s:
                self._end_term("ZooKeeper unreachable for a whole session timeout")
                with contextlib.suppress(Exception):
                    election.cancel()  # type: ignore[attr-defined]
                return
        with contextlib.suppress(Exception):
            election.cancel()  # type: ignore[attr-defined]

    # -- a term as leader -------------------------------------------------------------

    def _lead(self, client: KazooClient) -> None:
        if self._stopping.is_set() or client.state != KazooState.CONNECTED:
            return
        self.terms += 1
        storage = PostgresStorage(self.ha.state_url, holder=self.ha.identifier)
        manager = TransactionManager(self.config, TransactionStateStore(storage))
        log.info("elected: recovering the transaction state from %s", storage.location)
        manager.start()  # takes the new epoch, then recovers
        try:
            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                runner.run(self._serve(client, manager, storage.epoch))
        finally:
            with self._lock:
                self._step_down = None
            manager.stop()
            log.info("no longer leading (epoch %d)", storage.epoch)

    async def _serve(self, client: KazooClient, manager: TransactionManager, epoch: int) -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        server = new_server(manager, self.server_config)
        host, port = await server.start()

        def step_down() -> None:
            loop.call_soon_threadsafe(done.set)

        with self._lock:
            self._step_down = step_down
        try:
            if self._stopping.is_set() or client.state != KazooState.CONNECTED:
                return
            advertised = self.ha.advertise or host
            await loop.run_in_executor(None, self._publish, client, f"{advertised}:{port}")
            log.info("leading with epoch %d, serving on %s:%d", epoch, host, port)
            if self._on_serving is not None:
                self._on_serving(advertised, port, epoch)
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout=0.2)
                if manager.state is ManagerState.FAILED:
                    log.critical("the transaction manager failed (epoch %d); stepping down", epoch)
                    break
        finally:
            # Stop serving first: no connection may get another answer from this term.
            await server.close()
            await loop.run_in_executor(None, self._unpublish, client)

    def _publish(self, client: KazooClient, address: str) -> None:
        path = self.ha.zookeeper.leader_path
        with translated(f"publish the leader in {path}"):
            client.ensure_path(self.ha.zookeeper.base)
            try:
                client.create(path, address.encode(), ephemeral=True)
            except NodeExistsError:
                # a node of an earlier session of ours that is not yet gone
                client.delete(path)
                client.create(path, address.encode(), ephemeral=True)

    def _unpublish(self, client: KazooClient) -> None:
        path = self.ha.zookeeper.leader_path
        with contextlib.suppress(Exception):
            _data, stat = client.get(path)
            if stat.ephemeralOwner == client.client_id[0]:
                client.delete(path, version=stat.version)
