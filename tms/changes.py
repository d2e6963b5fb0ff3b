"""``TopicChanges``: a version per topic that moves whenever the topic gets new (or
rolled-back) entries, for long-poll.

``bump`` (by the writer, after a batch is durable) moves the version and tells the
listeners; ``wait_for_change`` blocks a thread until the version moves past one it read,
and listeners let event loops wait without blocking a thread (``tms.http.app``).
``finished`` tells the finish listeners that transactions which wrote to a topic are no
longer in progress (``tms.http.waiting`` wakes the reads held behind them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from tms.model import TopicId

__all__ = ["FinishListener", "TopicChanges", "TopicListener"]

log = logging.getLogger(__name__)

TopicListener = Callable[[TopicId, int], None]
"""Called with (topic, new version) after new entries landed; on the writer's thread."""

FinishListener = Callable[[TopicId, Sequence[int]], None]
"""Called with (topic, write pointers) when transactions that wrote to it finished."""


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
