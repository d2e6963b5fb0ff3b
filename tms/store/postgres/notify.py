"""``PgChangeFeed``: topic changes told to every instance on one PostgreSQL database
(``LISTEN``/``NOTIFY`` on channel ``tms_changes``), so a long-poll waiting on one instance
wakes on a publish made through another. See ``tms.changes.ChangeFeed``.

* ``announce(topic)`` never blocks: the topic joins a set that a sender thread sends
  as one statement (``pg_notify`` over ``unnest``) on its own connection, so a burst of
  batches costs one round trip. It is called after the batch is durable, so a reader
  woken by it reads the new rows.
* a listener thread on another connection ``LISTEN``s and calls ``on_change(topic)``
  for each notification from another instance (this instance's own, recognized by the
  sender's backend pid, are skipped: its waiters were woken already).
* either connection failing is retried every ``retry_s``; when the listener comes back
  it calls ``on_gap()``: notifications may have been missed, so every waiter should
  look again. Announcements that could not be sent are dropped (the same: a gap, which
  the other instances' waiters cover by their own timeouts).

Notifications carry ``<namespace>.<topic>`` ('.' is in neither name's alphabet).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from tms.model import TopicId
from tms.store.postgres.connections import connect
from txms_common.pgurl import redact

__all__ = ["CHANNEL", "PgChangeFeed"]

log = logging.getLogger(__name__)

CHANNEL = "tms_changes"
_SEND = "SELECT pg_notify('tms_changes', x) FROM unnest(%s::text[]) AS x"


class PgChangeFeed:
    """See the module docstring. Thread-safe."""

    def __init__(self, url: str, *, name: str = "tms", retry_s: float = 1.0) -> None:
        self._url = url
        self._where = redact(url)
        self._name = name
        self._retry_s = retry_s
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._stopping = threading.Event()
        self._sender_pid = 0
        self._threads: list[threading.Thread] = []

    def start(self, on_change: Callable[[TopicId], object], on_gap: Callable[[], None]) -> None:
        listening = threading.Event()
        self._threads = [
            threading.Thread(target=self._send_loop, name="tms-notify", daemon=True),
            threading.Thread(
                target=self._listen_loop,
                args=(on_change, on_gap, listening),
                name="tms-listen",
                daemon=True,
            ),
        ]
        for thread in self._threads:
            thread.start()
        listening.wait(10)  # changes made from now on reach this instance

    def announce(self, topic: TopicId) -> None:
        with self._cond:
            self._pending.add(f"{topic.namespace}.{topic.topic}")
            self._cond.notify()

    # -- sending --------------------------------------------------------------------------

    def _send_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stopping.is_set():
            with self._cond:
                while not self._pending and not self._stopping.is_set():
                    self._cond.wait(1.0)
                batch, self._pending = sorted(self._pending), set()
            if not batch:
                continue
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect(self._url, f"{self._name}-notify")
                    self._sender_pid = conn.info.backend_pid
                conn.execute(_SEND, (batch,))
            except psycopg.Error as exc:
                log.warning("cannot announce changes in %s: %s", self._where, exc)
                self._stopping.wait(self._retry_s)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # -- listening ------------------------------------------------------------------------

    def _listen_loop(
        self,
        on_change: Callable[[TopicId], object],
        on_gap: Callable[[], None],
        listening: threading.Event,
    ) -> None:
        first = True
        while not self._stopping.is_set():
            try:
                with connect(self._url, f"{self._name}-listen") as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    listening.set()
                    if not first:
                        on_gap()
                    first = False
                    while not self._stopping.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if note.pid != self._sender_pid:
                                self._deliver(note.payload, on_change)
            except psycopg.Error as exc:
                log.warning("listening for changes in %s failed: %s", self._where, exc)
                self._stopping.wait(self._retry_s)

    @staticmethod
    def _deliver(payload: str, on_change: Callable[[TopicId], object]) -> None:
        namespace, dot, topic = payload.partition(".")
        if not dot:
            return
        try:
            on_change(TopicId(namespace, topic))
        except Exception:
            log.exception("a change notification failed")

    def close(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(5)
