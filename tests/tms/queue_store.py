"""``QueueStore``: a real store with the faults and counts the queue tests inject
(fault injection around the key-value contract, ``tms.store.kv``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tms.errors import StorageUnavailableError
from tms.store.kv import KeyValueStore
from tms.store.queues import INDEX_TABLE


class QueueStore:
    """Wraps a real store: counts the queue index keys its scans hand out
    (``index_keys``); fails the next scan of the queue index from a key under
    ``fail_under``, once (a read error of the disk); with ``lands_then_fails`` set,
    applies the next write and then reports it failed, once (the sync's answer lost)."""

    def __init__(self, inner: KeyValueStore) -> None:
        self.inner = inner
        self.index_keys = 0
        self.fail_under: bytes | None = None
        self.lands_then_fails = False

    def table(self, name: bytes) -> Any:
        inner, store = self.inner.table(name), self
        if name != INDEX_TABLE:
            return inner

        class Table:
            def scan(self, start: bytes = b"", *args: Any, **kwargs: Any) -> Iterator[Any]:
                under = store.fail_under
                if under is not None and start.startswith(under):
                    store.fail_under = None
                    raise StorageUnavailableError("injected: the read failed")
                return store._counted(inner.scan(start, *args, **kwargs))

            def __getattr__(self, attr: str) -> Any:
                return getattr(inner, attr)

        return Table()

    def _counted(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self.index_keys += 1
            yield item

    def write(self, *args: Any, **kwargs: Any) -> None:
        self.inner.write(*args, **kwargs)
        if self.lands_then_fails:
            self.lands_then_fails = False
            raise StorageUnavailableError("injected: the write's answer was lost")

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)
