"""``BackgroundPublisher``: asynchronous, non-transactional publishing.

``submit`` queues a message and returns a ``concurrent.futures.Future`` at once; a
background thread takes everything queued, groups it by topic (keeping each topic's
order) and publishes each group in one request, then resolves the futures (and runs the
optional callbacks). The queue is bounded: ``submit`` blocks while ``max_pending``
messages wait, so a slow service slows producers instead of exhausting memory.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from tms.client.http import MessagingClient
from tms.errors import ServiceUnavailableError
from tms.model import TopicId

__all__ = ["BackgroundPublisher"]

log = logging.getLogger(__name__)

Callback = Callable[["Future[None]"], object]


class BackgroundPublisher:
    def __init__(
        self, client: MessagingClient, *, max_pending: int = 10_000, max_batch: int = 1_000
    ) -> None:
        if max_pending < 1 or max_batch < 1:
            raise ValueError("max_pending and max_batch must be positive")
        self.client = client
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._queue: deque[tuple[TopicId, bytes, Future[None]]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._in_flight = 0
        self._thread = threading.Thread(
            target=self._run, name="tms-background-publisher", daemon=True
        )
        self._thread.start()

    def submit(
        self, topic: TopicId, payload: bytes | str, callback: Callback | None = None
    ) -> Future[None]:
        """Queue one message (blocks while the queue is full)."""
        future: Future[None] = Future()
        if callback is not None:
            future.add_done_callback(callback)
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        with self._cond:
            while len(self._queue) >= self._max_pending and not self._closed:
                self._cond.wait()
            if self._closed:
                raise ServiceUnavailableError("the background publisher is closed")
            self._queue.append((topic, data, future))
            self._cond.notify_all()
        return future

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything submitted so far is published (or failed)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._in_flight, timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Publish what is queued, then stop."""
        self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def __enter__(self) -> BackgroundPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
                batch = [
                    self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))
                ]
                self._in_flight = len(batch)
                self._cond.notify_all()  # room in the queue again
            groups: dict[TopicId, list[tuple[bytes, Future[None]]]] = {}
            for topic, data, future in batch:
                groups.setdefault(topic, []).append((data, future))
            for topic, items in groups.items():
                try:
                    self.client.publish(topic, [data for data, _ in items])
                except Exception as exc:
                    for _, future in items:
                        future.set_exception(exc)
                else:
                    for _, future in items:
                        future.set_result(None)
            with self._cond:
                self._in_flight = 0
                self._cond.notify_all()
