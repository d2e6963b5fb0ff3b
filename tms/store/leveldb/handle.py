"""``DBHandle``: one LevelDB database that a failed write takes down until it is reopened.

Why: when LevelDB fails to append a batch to its log (disk full, I/O error) it reports
the error but keeps using the same log file, whose writer now believes bytes are there
that are not. Later writes on that handle succeed, and are acknowledged, but sit behind a
damaged stretch of the log, and replaying the log after a restart silently drops them. A
failed fsync leaves the last record "maybe there". So after **any** failed write the
handle is never written again: it is *down*, and every call — reads too — raises
``StorageUnavailableError`` until the database has been closed and opened again, which
replays the log up to its last whole record (what LevelDB does on every start).

Contract:

* ``use()`` (a context manager) yields the open ``plyvel.DB`` for one short call; the
  database is never closed while a call is inside. While the handle is down, ``use()``
  first tries to reopen it (at most once per ``retry_interval_s``, and one thread at a
  time); if that fails it raises ``StorageUnavailableError``;
* ``write(fill, sync, epoch)`` applies one write batch. Writes are **serialized**
  through a ``tms.commit.GroupCommit``: whoever finds no write running takes every batch
  queued meanwhile and writes them as one LevelDB batch (one log record, one sync), so
  concurrent writers (the topic writers of several topics, cleanup, topic changes) still
  share a sync, and a failure is known before the next write starts — no write is ever
  acknowledged from a handle on which an earlier one failed (LevelDB's own write queue
  merges as well, but its callers learn of a failure only when their threads run again,
  possibly after a later write's success was acknowledged). A failure fails every batch
  of that write;
* fences (``tms.store.kv``): a write may carry ``fence = (key, epoch)``, the database
  key of a fence and the epoch it must still hold; ``acquire_fence(key)`` writes the
  next epoch there. Both go through the same serialized writes, so a fence is checked
  against every acquisition before it (in earlier batches, or earlier in its own), and
  a refused write (``FencedError``) is left out of the LevelDB batch;
* ``epoch`` grows by one with every reopen: state derived from reads before it (writer
  positions, caches) must be read again. A write given ``epoch`` is refused once the
  handle has been reopened since (a write that failed may have landed after all);
* ``close()`` waits for calls inside ``use()`` and closes the database; afterwards every
  call raises ``StorageUnavailableError``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import plyvel

from tms.commit import GroupCommit
from tms.errors import FencedError, StorageUnavailableError, write_interrupted

__all__ = ["DBHandle", "Fill"]

log = logging.getLogger(__name__)

Fill = Callable[[Any], None]
"""Puts a caller's changes into a ``plyvel`` write batch (``batch.put``/``batch.delete``)."""

DB_ERRORS = (plyvel.Error, RuntimeError)
"""What plyvel raises: its own errors, and RuntimeError on a closed database or iterator."""


@dataclass(slots=True)
class _Write:
    fill: Fill
    sync: bool
    epoch: int | None
    fence: tuple[bytes, int] | None = None
    acquire: bytes | None = None  # a fence key to take the next epoch of
    acquired: int = 0
    error: StorageUnavailableError | None = None
    alone: bool = False  # the fill reads the database: no earlier change may be pending


def _noop(_batch: Any) -> None:
    pass


class DBHandle:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        open_db: Callable[[], plyvel.DB],
        *,
        retry_interval_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_db = open_db
        self._retry_interval_s = retry_interval_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when no call is inside
        self._active = 0
        self._db: plyvel.DB | None = open_db()
        self._broken: plyvel.DB | None = None  # down, not closed yet
        self._failure = ""
        self._next_attempt = 0.0
        self._recovering = False
        self._closed = False
        self.epoch = 0
        self._writes: GroupCommit[_Write] = GroupCommit(self._write_now, failed=write_interrupted)

    @property
    def up(self) -> bool:
        """Open and not down: a call now would not have to reopen the database first (a
        hint, read without the lock: a write may fail the next moment)."""
        return self._db is not None and not self._closed

    @property
    def db(self) -> plyvel.DB:
        """The open database (for tools and tests; calls should go through ``use``)."""
        with self.use() as db:
            return db

    # -- calls --------------------------------------------------------------------------

    @contextlib.contextmanager
    def use(self) -> Iterator[plyvel.DB]:
        db = self._enter()
        try:
            yield db
        finally:
            self._leave()

    def _enter(self) -> plyvel.DB:
        with self._lock:
            if self._db is None:
                self._recover_locked()
            db = self._db
            assert db is not None
            self._active += 1
            return db

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1
            if not self._active:
                self._idle.notify_all()

    # -- writes -------------------------------------------------------------------------

    def write(
        self,
        fill: Fill,
        *,
        sync: bool = True,
        epoch: int | None = None,
        fence: tuple[bytes, int] | None = None,
        alone: bool = False,
    ) -> None:
        """Apply ``fill``'s changes atomically (durably with ``sync``); see the module
        docstring. With ``epoch``, only if the database was not reopened since (the
        caller's state is from that epoch); with ``fence``, only while the fence holds;
        with ``alone``, in a LevelDB batch of its own, after every earlier write was
        applied (so ``fill`` may read the database through ``use``: what it reads stays
        true until its changes are applied). Raises ``StorageUnavailableError``
        (``FencedError``)."""
        mine = _Write(fill, sync, epoch, fence, alone=alone)
        self._writes.run([mine])
        if mine.error is not None:
            raise mine.error

    def acquire_fence(self, key: bytes) -> int:
        """Durably store the next epoch of the fence at ``key``; that epoch."""
        mine = _Write(_noop, True, None, acquire=key)
        self._writes.run([mine])
        if mine.error is not None:
            raise mine.error
        return mine.acquired

    def _write_now(self, batch: list[_Write]) -> None:
        """Write ``batch`` in LevelDB batches, one for each run of writes and one for
        each ``alone`` write, in order."""
        group: list[_Write] = []
        for w in batch:
            if w.alone and group:
                self._write_group(group)
                group = []
            group.append(w)
            if w.alone:
                self._write_group(group)
                group = []
        if group:
            self._write_group(group)

    def _write_group(self, batch: list[_Write]) -> None:
        """Write ``batch`` as one LevelDB batch, setting each one's ``error``."""
        try:
            db = self._enter()
        except StorageUnavailableError as exc:
            for w in batch:
                w.error = exc
            return
        try:
            writes = []
            fences: dict[bytes, int] = {}  # fence epochs as of this point of the batch
            error: StorageUnavailableError | None
            try:
                for w in batch:
                    if w.epoch is not None and w.epoch != self.epoch:
                        w.error = StorageUnavailableError(
                            "the store was reopened after a failure since this write was prepared"
                        )
                    elif w.acquire is not None:
                        w.acquired = fences[w.acquire] = self._fence(db, fences, w.acquire) + 1
                        writes.append(w)
                    elif w.fence is not None and self._fence(db, fences, w.fence[0]) != w.fence[1]:
                        w.error = FencedError(f"fence epoch {w.fence[1]} is not the newest")
                    else:
                        writes.append(w)
                if not writes:
                    return
                wb = db.write_batch(sync=any(w.sync for w in writes))
                for w in writes:
                    w.fill(wb)
                for key, value in fences.items():
                    wb.put(key, b"%d" % value)
            except Exception as exc:  # a bad operation (a bug): nothing was written
                log.exception("building a LevelDB write batch failed")
                error = StorageUnavailableError(f"a write batch could not be built: {exc!r}")
                writes = [w for w in batch if w.error is None]
            else:
                try:
                    wb.write()
                    error = None
                except DB_ERRORS as exc:
                    # Down before the next write may start: this thread still holds the
                    # write turn, so no later batch reaches the damaged handle.
                    self._fail(db, exc)
                    error = StorageUnavailableError(f"LevelDB write failed: {exc}")
            for w in writes:
                w.error = error
        finally:
            self._leave()

    @staticmethod
    def _fence(db: plyvel.DB, fences: dict[bytes, int], key: bytes) -> int:
        if key in fences:
            return fences[key]
        value = db.get(key)
        return int(value) if value is not None else 0

    # -- failure and recovery -----------------------------------------------------------

    def _fail(self, db: plyvel.DB, exc: BaseException) -> None:
        with self._lock:
            if self._db is not db:
                return
            self._db = None
            self._broken = db
            self._failure = str(exc)
            self._next_attempt = self._monotonic()  # the next call tries at once
        log.error("LevelDB write failed; the database is down until reopened: %s", exc)

    def _recover_locked(self) -> None:
        """Reopen the database (the caller holds ``_lock``; ``_db`` is None) or raise."""
        if self._closed:
            raise StorageUnavailableError("the store is closed")
        if self._recovering or self._monotonic() < self._next_attempt:
            raise StorageUnavailableError(
                f"the store is down after a failed write ({self._failure}); reopening"
            )
        self._recovering = True
        try:
            while self._active:  # nothing may be inside the database it closes
                self._idle.wait()
            broken, self._broken = self._broken, None
            self._lock.release()
            try:
                if broken is not None:
                    broken.close()
                db = self._open_db()
            finally:
                self._lock.acquire()  # (close() waits for this reopen, then closes it)
        except StorageUnavailableError as exc:
            self._next_attempt = self._monotonic() + self._retry_interval_s
            log.warning("reopening LevelDB failed, retrying later: %s", exc)
            raise
        finally:
            self._recovering = False
            self._idle.notify_all()
        self._db = db
        self.epoch += 1
        log.warning("LevelDB reopened after a failed write (%s)", self._failure)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            while self._active or self._recovering:
                self._idle.wait()
            db, self._db = self._db, None
            broken, self._broken = self._broken, None
        for handle in (db, broken):
            if handle is not None and not handle.closed:
                handle.close()
