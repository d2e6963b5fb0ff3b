"""``LevelDBStore``: one LevelDB database, one key prefix per table. See
``tms.store.kv``. This module is the boundary where plyvel's errors become
``StorageUnavailableError``.

Scans read from a LevelDB snapshot, so a scan sees one state even while writers go on.
plyvel releases the GIL while LevelDB writes, so concurrent synced writers (one per topic)
are merged by LevelDB's own write queue into shared log syncs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import plyvel

from tms.errors import StorageUnavailableError
from tms.store.kv import WriteOp

__all__ = ["LevelDBStore"]


class _LevelDBTable:
    def __init__(self, owner: LevelDBStore, name: bytes) -> None:
        self._owner = owner
        self._prefix = name + b"/"
        self._view = owner.db.prefixed_db(self._prefix)

    def get(self, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._view.get(key)
            return value
        except (plyvel.Error, RuntimeError) as exc:
            raise StorageUnavailableError(f"LevelDB read failed: {exc}") from exc

    def scan(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        try:
            snapshot = self._view.snapshot()
            iterator = snapshot.iterator(start=start, stop=stop, reverse=reverse)
        except (plyvel.Error, RuntimeError) as exc:
            raise StorageUnavailableError(f"LevelDB scan failed: {exc}") from exc
        return _scan(iterator, snapshot)

    def write(
        self,
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        *,
        sync: bool = True,
    ) -> None:
        prefix = self._prefix
        try:
            with self._owner.db.write_batch(sync=sync) as batch:
                for key, value in puts:
                    batch.put(prefix + key, value)
                for key in deletes:
                    batch.delete(prefix + key)
        except (plyvel.Error, RuntimeError) as exc:
            raise StorageUnavailableError(f"LevelDB write failed: {exc}") from exc

    def approximate_size(self, start: bytes, stop: bytes | None) -> int:
        end = self._prefix[:-1] + b"0" if stop is None else self._prefix + stop  # '0' > '/'
        try:
            size: int = self._owner.db.approximate_size(self._prefix + start, end)
            return size
        except (plyvel.Error, RuntimeError) as exc:
            raise StorageUnavailableError(f"LevelDB size estimate failed: {exc}") from exc


def _scan(iterator: Any, snapshot: Any) -> Iterator[tuple[bytes, bytes]]:
    # ``yield from`` hands the C iterator's items through without running Python code per
    # item; errors raised while iterating still cross this boundary.
    try:
        yield from iterator
    except (plyvel.Error, RuntimeError) as exc:
        raise StorageUnavailableError(f"LevelDB scan failed: {exc}") from exc
    finally:
        iterator.close()
        snapshot.close()


class LevelDBStore:
    """See ``tms.store.kv.KeyValueStore``. One process at a time (LevelDB's own lock)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        write_buffer_bytes: int = 64 * 1024 * 1024,
        block_cache_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.path = os.fspath(path)
        try:
            os.makedirs(self.path, exist_ok=True)
            self.db = plyvel.DB(
                self.path,
                create_if_missing=True,
                write_buffer_size=write_buffer_bytes,
                lru_cache_size=block_cache_bytes,
                bloom_filter_bits=10,
            )
        except (plyvel.Error, OSError) as exc:
            raise StorageUnavailableError(f"cannot open LevelDB at {self.path}: {exc}") from exc
        self._tables: dict[bytes, _LevelDBTable] = {}

    def table(self, name: bytes) -> _LevelDBTable:
        if b"/" in name or not name:
            raise ValueError("table names are non-empty and contain no '/'")
        if name not in self._tables:
            self._tables[name] = _LevelDBTable(self, name)
        return self._tables[name]

    def write(self, ops: Sequence[WriteOp], *, sync: bool = True) -> None:
        prefixes: dict[bytes, bytes] = {}
        try:
            with self.db.write_batch(sync=sync) as batch:
                put, delete = batch.put, batch.delete
                for name, key, value in ops:
                    prefix = prefixes.get(name)
                    if prefix is None:
                        prefix = prefixes[name] = name + b"/"
                    if value is None:
                        delete(prefix + key)
                    else:
                        put(prefix + key, value)
        except (plyvel.Error, RuntimeError) as exc:
            raise StorageUnavailableError(f"LevelDB write failed: {exc}") from exc

    def close(self) -> None:
        if not self.db.closed:
            self.db.close()
