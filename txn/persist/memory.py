"""State storage in memory: for tests, and for managers that must survive only a
simulated restart (hand the same ``MemoryStorage`` to the next manager)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from txn.errors import TxStorageError

__all__ = ["MemoryStorage"]


class _MemoryLog:
    def __init__(self, owner: MemoryStorage, timestamp_ms: int) -> None:
        self._owner = owner
        self._ts = timestamp_ms
        self._closed = False

    def write(self, data: bytes) -> None:
        if self._closed:
            raise TxStorageError(f"log {self._ts} is closed")
        with self._owner.lock:
            self._owner.logs[self._ts] += data

    def sync(self) -> None:
        if self._closed:
            raise TxStorageError(f"log {self._ts} is closed")
        self._owner.syncs += 1

    def close(self) -> None:
        self._closed = True

    def fileno(self) -> int | None:
        return None


class MemoryStorage:
    """See ``txn.persist.storage.StateStorage``. ``syncs`` counts log syncs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.snapshots: dict[int, bytes] = {}
        self.logs: dict[int, bytearray] = {}
        self.syncs = 0

    @property
    def location(self) -> str:
        return "memory"

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def list_snapshots(self) -> list[int]:
        with self.lock:
            return sorted(self.snapshots)

    def read_snapshot(self, timestamp_ms: int) -> bytes:
        with self.lock:
            try:
                return self.snapshots[timestamp_ms]
            except KeyError as exc:
                raise TxStorageError(f"no snapshot {timestamp_ms}") from exc

    def write_snapshot(self, timestamp_ms: int, data: bytes) -> None:
        with self.lock:
            self.snapshots[timestamp_ms] = bytes(data)

    def delete_snapshot(self, timestamp_ms: int) -> None:
        with self.lock:
            self.snapshots.pop(timestamp_ms, None)

    def list_logs(self) -> list[int]:
        with self.lock:
            return sorted(self.logs)

    @contextlib.contextmanager
    def read_log(self, timestamp_ms: int) -> Iterator[bytes]:
        with self.lock:
            if timestamp_ms not in self.logs:
                raise TxStorageError(f"no log {timestamp_ms}")
            data = bytes(self.logs[timestamp_ms])
        yield data

    def create_log(self, timestamp_ms: int) -> _MemoryLog:
        with self.lock:
            if timestamp_ms in self.logs:
                raise TxStorageError(f"log {timestamp_ms} exists already")
            self.logs[timestamp_ms] = bytearray()
        return _MemoryLog(self, timestamp_ms)

    def truncate_log(self, timestamp_ms: int, size: int) -> None:
        with self.lock:
            del self.logs[timestamp_ms][size:]

    def delete_log(self, timestamp_ms: int) -> None:
        with self.lock:
            self.logs.pop(timestamp_ms, None)
