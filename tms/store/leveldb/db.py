"""``LevelDBStore``: one LevelDB database, one key prefix per table. See
``tms.store.kv``. This module (with ``handle``) is the boundary where plyvel's errors
become ``StorageUnavailableError``.

Every call goes through a ``DBHandle``: a failed write takes the database down until it
has been reopened (and its log replayed), so nothing is acknowledged from a handle that
may be damaged; ``epoch`` tells what read state from before a reopen is stale.

A scan is one LevelDB iterator, which reads one consistent state (the sequence number
at its creation) even while writers go on. It is read in chunks (1, 2, 4 ... 256 rows),
each inside the handle, so a reopen never closes the database under a running step, and
a scan whose database was reopened fails with ``StorageUnavailableError``. Concurrent
writes of any tables are merged by the handle into one synced LevelDB batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, islice
from typing import Any

import plyvel

from tms.errors import StorageUnavailableError
from tms.store.kv import Fence, Update, WriteOp
from tms.store.leveldb.handle import DB_ERRORS, DBHandle

__all__ = ["LevelDBStore"]

_MAX_CHUNK = 256
_FENCE_PREFIX = b"/fence/"  # no table's keys start with '/' (a name is never empty)


class _LevelDBTable:
    def __init__(self, owner: LevelDBStore, name: bytes) -> None:
        self._owner = owner
        self._prefix = name + b"/"

    @property
    def epoch(self) -> int:
        return self._owner.handle.epoch

    def get(self, key: bytes) -> bytes | None:
        try:
            with self._owner.handle.use() as db:
                value: bytes | None = db.get(self._prefix + key)
                return value
        except DB_ERRORS as exc:
            raise StorageUnavailableError(f"LevelDB read failed: {exc}") from exc

    def scan(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return chain.from_iterable(self.scan_chunks(start, stop, reverse=reverse))

    def scan_chunks(
        self, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[list[tuple[bytes, bytes]]]:
        prefix = self._prefix

        def open_iterator(db: plyvel.DB) -> Any:
            return db.prefixed_db(prefix).iterator(start=start, stop=stop, reverse=reverse)

        return _scan_chunks(self._owner.handle, open_iterator)

    def write(
        self,
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        *,
        sync: bool = True,
        epoch: int | None = None,
    ) -> None:
        prefix = self._prefix

        def fill(batch: Any) -> None:
            for key, value in puts:
                batch.put(prefix + key, value)
            for key in deletes:
                batch.delete(prefix + key)

        self._owner.handle.write(fill, sync=sync, epoch=epoch)

    def approximate_size(self, start: bytes, stop: bytes | None) -> int:
        end = self._prefix[:-1] + b"0" if stop is None else self._prefix + stop  # '0' > '/'
        try:
            with self._owner.handle.use() as db:
                size: int = db.approximate_size(self._prefix + start, end)
                return size
        except DB_ERRORS as exc:
            raise StorageUnavailableError(f"LevelDB size estimate failed: {exc}") from exc


def _scan_chunks(
    handle: DBHandle, open_iterator: Callable[[plyvel.DB], Any]
) -> Iterator[list[tuple[bytes, bytes]]]:
    # Each chunk is read inside the handle (never across a yield: a slow reader must not
    # hold a reopen back); ``islice`` pulls the rows in C.
    iterator = None
    size = 1
    try:
        while True:
            try:
                with handle.use() as db:
                    if iterator is None:
                        iterator = open_iterator(db)
                    chunk = list(islice(iterator, size))
            except DB_ERRORS as exc:
                raise StorageUnavailableError(f"LevelDB scan failed: {exc}") from exc
            if chunk:
                yield chunk
            if len(chunk) < size:
                return
            size = min(size * 2, _MAX_CHUNK)
    finally:
        if iterator is not None:
            iterator.close()


class LevelDBStore:
    """See ``tms.store.kv.KeyValueStore``. One process at a time (LevelDB's own lock)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        write_buffer_bytes: int = 64 * 1024 * 1024,
        block_cache_bytes: int = 64 * 1024 * 1024,
        retry_interval_s: float = 1.0,
    ) -> None:
        self.path = os.fspath(path)

        def open_db() -> plyvel.DB:
            try:
                os.makedirs(self.path, exist_ok=True)
                return plyvel.DB(
                    self.path,
                    create_if_missing=True,
                    write_buffer_size=write_buffer_bytes,
                    lru_cache_size=block_cache_bytes,
                    bloom_filter_bits=10,
                )
            except (plyvel.Error, OSError) as exc:
                raise StorageUnavailableError(f"cannot open LevelDB at {self.path}: {exc}") from exc

        self.handle = DBHandle(open_db, retry_interval_s=retry_interval_s)
        self._tables: dict[bytes, _LevelDBTable] = {}

    @property
    def db(self) -> plyvel.DB:
        """The open plyvel database (tools and tests)."""
        return self.handle.db

    @property
    def epoch(self) -> int:
        return self.handle.epoch

    @property
    def local_reads(self) -> bool:
        """Reads are answered from this process's files while the handle is up
        (``tms.store.kv``)."""
        return self.handle.up

    def table(self, name: bytes) -> _LevelDBTable:
        if b"/" in name or not name:
            raise ValueError("table names are non-empty and contain no '/'")
        if name not in self._tables:
            self._tables[name] = _LevelDBTable(self, name)
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
        def fill(batch: Any) -> None:
            _fill(batch, ops)

        def fill_with_updates(batch: Any) -> None:
            # alone in its LevelDB batch, after every earlier write: what is read here
            # stays true until these changes are applied
            _fill(batch, ops)
            present = {(name, key): value is not None for name, key, value in ops}
            with self.handle.use() as db:

                def exists(name: bytes, key: bytes) -> bool:
                    known = present.get((name, key))
                    return db.get(name + b"/" + key) is not None if known is None else known

                kept = [u for u in updates if exists(u[0], u[1])]
            _fill(batch, kept)

        db_fence = None if fence is None else (_FENCE_PREFIX + fence[0], fence[1])
        self.handle.write(
            fill_with_updates if updates else fill,
            sync=sync,
            epoch=epoch,
            fence=db_fence,
            alone=bool(updates),
        )

    def acquire_fence(self, name: bytes) -> int:
        return self.handle.acquire_fence(_FENCE_PREFIX + name)

    def close(self) -> None:
        self.handle.close()


def _fill(batch: Any, ops: Sequence[WriteOp]) -> None:
    prefixes: dict[bytes, bytes] = {}
    put, delete = batch.put, batch.delete
    for name, key, value in ops:
        prefix = prefixes.get(name)
        if prefix is None:
            prefix = prefixes[name] = name + b"/"
        if value is None:
            delete(prefix + key)
        else:
            put(prefix + key, value)
