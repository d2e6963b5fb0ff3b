"""A daemon thread that runs a function now and then every ``interval_s`` seconds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["PeriodicTask"]

log = logging.getLogger(__name__)


class PeriodicTask:
    """Runs ``fn`` at start and every ``interval_s`` until ``stop()``; exceptions are logged
    and the loop goes on. ``on_stop`` runs once on the task's thread when it stops."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        fn: Callable[[], object],
        *,
        run_at_start: bool = True,
        on_stop: Callable[[], object] | None = None,
    ) -> None:
        self._name = name
        self._interval_s = interval_s
        self._fn = fn
        self._run_at_start = run_at_start
        self._on_stop = on_stop
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run_once(self) -> None:
        try:
            self._fn()
        except Exception:
            log.exception("periodic task %s failed", self._name)

    def _loop(self) -> None:
        if self._run_at_start:
            self._run_once()
        while not self._stopped.wait(self._interval_s):
            self._run_once()
        if self._on_stop is not None:
            try:
                self._on_stop()
            except Exception:
                log.exception("periodic task %s failed while stopping", self._name)
