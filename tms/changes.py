"""``TopicChanges``: a version per topic that moves whenever the topic gets new (or
rolled-back) entries, for long-poll.

``bump`` (by the writer, after a batch is durable) moves the version and tells the
listeners; ``wait_for_change`` blocks a thread until the version moves past one it read,
and listeners let event loops wait without blocking a thread (``tms.http.app``).
``finished`` tells the finish listeners that transactions which wrote to a topic are no
longer in progress (``tms.http.waiting`` wakes the reads held behind them).

``ChangeFeed``: how instances sharing a store tell each other about changes (PostgreSQL:
``tms.store.postgres.notify``): the service announces each topic it changed, and bumps
the topics other instances announce (``bump``), or every topic when some announcements
may have been missed (``bump_all``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from tms.model import TopicId

__all__ = ["ChangeFeed", "FinishListener", "TopicChanges", "TopicListener"]

log = logging.getLogger(__name__)

TopicListener = Callable[[TopicId, int], None]
"""Called with (topic, new version) after new entries landed; on the writer's thread."""

FinishListener = Callable[[TopicId, Sequence[int]], None]
"""Called with (topic, write pointers) when transactions that wrote to it finished."""


class ChangeFeed(Protocol):
    """Changes told between the instances of one store (see the module docstring)."""

    def start(self, on_change: Callable[[TopicId], object], on_gap: Callable[[], None]) -> None:
        """Call ``on_change(topic)`` for each topic another instance announces, and
        ``on_gap()`` when announcements may have been missed; from the return on, no
        announcement is missed unless ``on_gap`` says so."""
        ...

    def announce(self, topic: TopicId) -> None:
        """Tell the other instances (never blocks; called once the change is durable)."""
        ...

    def close(self) -> None: ...


class TopicChanges:
    """See the module docstring. Thread-safe."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._versions: dict[TopicId, int] = {}
        self._listeners: list[TopicListener] = []
        self._finish_listeners: list[FinishListener] = []
        self._closed = False

    def bump(self, topic: TopicId) -> int:
        """Move ``topic``'s version, wake waiters, tell listeners; the new version."""
        with self._changed:
            version = self._versions.get(topic, 0) + 1
            self._versions[topic] = version
            self._changed.notify_all()
        for listener in list(self._listeners):
            try:
                listener(topic, version)
            except Exception:
                log.exception("topic listener failed")
        return version

    def bump_all(self) -> None:
        """Bump every topic known here (waiters look again)."""
        with self._changed:
            topics = list(self._versions)
        for topic in topics:
            self.bump(topic)

    def version(self, topic: TopicId) -> int:
        with self._changed:
            return self._versions.get(topic, 0)

    def wait_for_change(self, topic: TopicId, version: int, timeout_s: float) -> int:
        """Block until ``topic``'s version differs from ``version``, the timeout passes or
        ``close`` is called; return the version now."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._versions.get(topic, 0) == version and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self._versions.get(topic, 0)

    def add_listener(self, listener: TopicListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: TopicListener) -> None:
        self._listeners.remove(listener)

    def finished(self, topic: TopicId, write_pointers: Sequence[int]) -> None:
        for listener in list(self._finish_listeners):
            try:
                listener(topic, write_pointers)
            except Exception:
                log.exception("finish listener failed")

    def add_finish_listener(self, listener: FinishListener) -> None:
        self._finish_listeners.append(listener)

    def remove_finish_listener(self, listener: FinishListener) -> None:
        self._finish_listeners.remove(listener)

    def close(self) -> None:
        """Release every waiter."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
