"""State storage in a local directory, in Tephra's ``LocalFileTransactionStateStorage``
layout: ``snapshot.<ts>`` (written as ``.in-progress.<ts>`` then renamed) and
``txlog.<ts>``. A Tephra state directory can be adopted as is; the logs we write are in
our framed format (``txn.persist.log_codec``), which Tephra's tools do not read.

This module is the boundary where ``OSError`` becomes ``TxStorageError``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from txn.errors import TxStorageError

__all__ = ["LocalDirStorage"]

_SNAPSHOT = "snapshot"
_LOG = "txlog"
_TEMP = ".in-progress"
_LOCK = ".txn.lock"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _FileLog:
    """An append-only log file written with ``os.write`` and synced with ``fdatasync``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            _fsync_dir(path.parent)  # the new name must survive a crash too
        except FileExistsError as exc:
            raise TxStorageError(f"log {path} exists already") from exc
        except OSError as exc:
            raise TxStorageError(f"cannot create log {path}: {exc}") from exc

    def write(self, data: bytes) -> None:
        if self._fd is None:
            raise TxStorageError(f"log {self._path} is closed")
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            raise TxStorageError(f"cannot write log {self._path}: {exc}") from exc

    def sync(self) -> None:
        if self._fd is None:
            raise TxStorageError(f"log {self._path} is closed")
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise TxStorageError(f"cannot sync log {self._path}: {exc}") from exc

    def fileno(self) -> int | None:
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


class LocalDirStorage:
    """See ``txn.persist.storage.StateStorage``. One process at a time: ``open`` takes an
    exclusive lock on the directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._dir = Path(directory)
        self._lock_fd: int | None = None

    @property
    def location(self) -> str:
        return str(self._dir)

    def open(self) -> None:
        if self._lock_fd is not None:
            return
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._dir / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise TxStorageError(f"cannot use state directory {self._dir}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise TxStorageError(
                    f"state directory {self._dir} is in use by another process"
                ) from exc
            raise TxStorageError(f"cannot lock state directory {self._dir}: {exc}") from exc
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _list(self, prefix: str) -> list[int]:
        try:
            names = os.listdir(self._dir)
        except OSError as exc:
            raise TxStorageError(f"cannot list {self._dir}: {exc}") from exc
        stamps = []
        for name in names:
            parts = name.split(".")
            if len(parts) == 2 and parts[0] == prefix and parts[1].isdigit():
                stamps.append(int(parts[1]))
        return sorted(stamps)

    def _path(self, prefix: str, timestamp_ms: int) -> Path:
        return self._dir / f"{prefix}.{timestamp_ms}"

    def list_snapshots(self) -> list[int]:
        return self._list(_SNAPSHOT)

    def read_snapshot(self, timestamp_ms: int) -> bytes:
        path = self._path(_SNAPSHOT, timestamp_ms)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise TxStorageError(f"cannot read snapshot {path}: {exc}") from exc

    def write_snapshot(self, timestamp_ms: int, data: bytes) -> None:
        final = self._path(_SNAPSHOT, timestamp_ms)
        temp = self._dir / f"{_TEMP}.{timestamp_ms}"
        try:
            with open(temp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, final)
            _fsync_dir(self._dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise TxStorageError(f"cannot write snapshot {final}: {exc}") from exc

    def delete_snapshot(self, timestamp_ms: int) -> None:
        self._unlink(self._path(_SNAPSHOT, timestamp_ms))

    def list_logs(self) -> list[int]:
        return self._list(_LOG)

    @contextlib.contextmanager
    def read_log(self, timestamp_ms: int) -> Iterator[bytes]:
        path = self._path(_LOG, timestamp_ms)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed in finally below
        except OSError as exc:
            raise TxStorageError(f"cannot read log {path}: {exc}") from exc
        try:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                yield b""
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                yield m  # type: ignore[misc]  # mmap supports the buffer slicing we use
        except OSError as exc:
            raise TxStorageError(f"cannot read log {path}: {exc}") from exc
        finally:
            f.close()

    def create_log(self, timestamp_ms: int) -> _FileLog:
        return _FileLog(self._path(_LOG, timestamp_ms))

    def truncate_log(self, timestamp_ms: int, size: int) -> None:
        path = self._path(_LOG, timestamp_ms)
        try:
            with open(path, "r+b") as f:
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise TxStorageError(f"cannot truncate log {path}: {exc}") from exc

    def delete_log(self, timestamp_ms: int) -> None:
        self._unlink(self._path(_LOG, timestamp_ms))

    def _unlink(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise TxStorageError(f"cannot delete {path}: {exc}") from exc
