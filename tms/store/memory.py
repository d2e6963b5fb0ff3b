"""An in-memory ``KeyValueStore`` (tests, and ephemeral topics). See ``tms.store.kv``."""

from __future__ import annotations

import threading
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence

from tms.errors import FencedError, StorageUnavailableError
from tms.store.kv import Fence, Update, WriteOp

__all__ = ["MemoryStore"]


class _MemoryTable:
    def __init__(self, owner: MemoryStore) -> None:
        self._owner = owner
        self._keys: list[bytes] = []
        self._values: dict[bytes, bytes] = {}

    @property
    def epoch(self) -> int:
        return 0

    def get(self, key: bytes) -> bytes | None:
        with self._owner.lock:
            self._owner.check_open()
            return self._values.get(key)

    def scan(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        with self._owner.lock:
            self._owner.check_open()
            lo = bisect_left(self._keys, start)
            hi = len(self._keys) if stop is None else bisect_left(self._keys, stop)
            # A copy of the range: later writes must not show through (the contract's
            # consistent view).
            items = [(k, self._values[k]) for k in self._keys[lo:hi]]
        if reverse:
            items.reverse()
        return iter(items)

    def scan_chunks(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[list[tuple[bytes, bytes]]]:
        items = list(self.scan(start, stop, reverse=reverse))
        return iter([items] if items else [])

    def write(
        self,
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        *,
        sync: bool = True,
        epoch: int | None = None,
    ) -> None:
        with self._owner.lock:
            self._owner.check_open(epoch)
            for key, value in puts:
                self.apply(key, value)
            for key in deletes:
                self.apply(key, None)

    def approximate_size(self, start: bytes, stop: bytes | None) -> int:
        """Exact: the bytes of the range's keys and values."""
        return sum(len(k) + len(v) for k, v in self.scan(start, stop))

    def has(self, key: bytes) -> bool:
        """Whether ``key`` is there; the caller holds the store's lock."""
        return key in self._values

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One change; the caller holds the store's lock."""
        if value is None:
            if self._values.pop(key, None) is not None:
                del self._keys[bisect_left(self._keys, key)]
            return
        if key not in self._values:
            insort(self._keys, key)
        self._values[key] = bytes(value)


class MemoryStore:
    """See ``tms.store.kv.KeyValueStore``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._tables: dict[bytes, _MemoryTable] = {}
        self._fences: dict[bytes, int] = {}
        self._closed = False

    epoch = 0
    """Never changes: memory does not fail."""

    @property
    def local_reads(self) -> bool:
        """Reads are answered from memory while open (``tms.store.kv``)."""
        return not self._closed

    def check_open(self, epoch: int | None = None) -> None:
        if self._closed:
            raise StorageUnavailableError("the store is closed")
        if epoch not in (None, 0):
            raise StorageUnavailableError(f"the store has no epoch {epoch}")

    def table(self, name: bytes) -> _MemoryTable:
        with self.lock:
            if name not in self._tables:
                self._tables[name] = _MemoryTable(self)
            return self._tables[name]

    def write(
        self,
        ops: Sequence[WriteOp],
        *,
        sync: bool = True,
        epoch: int | None = None,
        fence: Fence | None = None,
        updates: Sequence[Update] = (),
        new_keys: bool = False,  # a hint this engine has no use for
    ) -> None:
        with self.lock:
            self.check_open(epoch)
            if fence is not None and self._fences.get(fence[0]) != fence[1]:
                raise FencedError(f"fence {fence[0]!r} epoch {fence[1]} is not the newest")
            tables = self._tables
            for name, key, value in ops:
                if name not in tables:
                    tables[name] = _MemoryTable(self)
                tables[name].apply(key, value)
            for name, key, value in updates:
                if name in tables and tables[name].has(key):
                    tables[name].apply(key, value)

    def acquire_fence(self, name: bytes) -> int:
        with self.lock:
            self.check_open()
            epoch = self._fences[name] = self._fences.get(name, 0) + 1
            return epoch

    def close(self) -> None:
        self._closed = True
