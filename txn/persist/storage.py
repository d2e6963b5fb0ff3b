"""Contracts of the byte-level state storage (snapshots and logs, keyed by timestamp).

Two implementations: ``LocalDirStorage`` (a directory in Tephra's layout, the default)
and ``MemoryStorage`` (tests). What snapshots and logs *mean* — newest snapshot plus the
logs since it — lives in ``txn.persist.store``; backends only move bytes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

__all__ = ["LogWriter", "StateStorage"]


class LogWriter(Protocol):
    """An append-only log file, open for writing."""

    def write(self, data: bytes) -> None:
        """Append ``data`` (not yet durable). Raises ``TxStorageError``."""

    def sync(self) -> None:
        """Make everything written so far durable (fdatasync). Raises ``TxStorageError``."""

    def close(self) -> None:
        """Close the file; written data stays. Never raises for an already closed file."""

    def fileno(self) -> int | None:
        """The open file's descriptor (syncing it elsewhere is ``sync``), or None when
        the log is not an OS file or is closed."""


class StateStorage(Protocol):
    """Snapshots and logs as byte blobs named by millisecond timestamps.

    Every method raises ``TxStorageError`` when the medium fails. Listings are ascending.
    """

    @property
    def location(self) -> str:
        """Where the state lives, for messages."""
        ...

    def open(self) -> None:
        """Prepare the storage (create the directory, take the lock). Idempotent."""

    def close(self) -> None:
        """Release what ``open`` took."""

    def list_snapshots(self) -> list[int]: ...

    def read_snapshot(self, timestamp_ms: int) -> bytes: ...

    def write_snapshot(self, timestamp_ms: int, data: bytes) -> None:
        """Store a snapshot atomically and durably: afterwards it is complete or absent."""

    def delete_snapshot(self, timestamp_ms: int) -> None: ...

    def list_logs(self) -> list[int]: ...

    def read_log(self, timestamp_ms: int) -> AbstractContextManager[bytes]:
        """The log's bytes (maybe memory-mapped) while the context is open."""
        ...

    def create_log(self, timestamp_ms: int) -> LogWriter:
        """Create a new, empty log; raises ``TxStorageError`` if it exists already."""
        ...

    def truncate_log(self, timestamp_ms: int, size: int) -> None:
        """Cut a log to ``size`` bytes, durably (used to remove a torn last record)."""

    def delete_log(self, timestamp_ms: int) -> None: ...
