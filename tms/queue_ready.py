"""``ReadyWindow``: a window of a queue's ready index held in memory by its writer, so a
receive takes the next ready entries from a list rather than from an iterator over the
store (``tms.queue_batch``).

The window is exact: over its range [``low``, ``high``) (``high`` None: to the end of
the ready kind) it holds every ready index key the store holds, in order — keys only
(prefix, priority, due time, id: never a payload), at most ``MAX_KEYS`` of them.

* It is learnt from the receives' own scans of the store (``learn``): a scan from
  ``begin`` that read every entry up to its last one (or to the end of the kind) saw
  exactly what the store held there before the batch's write. A scan that starts where
  the window ends extends it; any other replaces it.
* Once a batch is written, a window that ends before the end of the kind and has room
  is filled on from the store (``fill``), up to its bound: so in the common case — the
  ready messages fit — it reaches the end, and the entries enqueued later join it
  without a receive ever reading them from the store.
* It follows the writer's writes (``update``): the writer is the only one adding or
  deleting a queue's index entries (the storage contract's one writer per topic), so
  once a batch is written, the ready entries it deleted leave the window and those it
  put within the range join it (entries put outside it are the store's alone).
* Over ``MAX_KEYS`` the last keys are dropped and ``high`` comes down to the first one
  dropped: a queue with a million ready messages keeps the first few thousand keys in
  memory (~1.5 MiB at most), and a receive that reaches ``high`` goes on in the store.
* It lives and dies with the writer's other memory (``RowCache``, ``LeaseTable``):
  changed only after a write succeeded, forgotten when one fails (``clear``: only the
  store knows then), and a writer replaced starts without one.

Messages leased in memory keep their ready entries (``tms.queue_leases``): the window
holds those too, and a receive steps over them as it would over the store's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from tms.codec.keys import stop_key_for_prefix
from tms.errors import TmsError
from tms.queue_index import IndexScans
from tms.store.queues import INDEX_TABLE
from tms.store.tables import TableBatch

__all__ = ["MAX_KEYS", "ReadyReads", "ReadyWindow"]

MAX_KEYS = 16384


class ReadyWindow:
    """See the module docstring. Used by one writer's batches, one at a time; a batch
    only reads it (``covers``, ``keys_from``) until it is written."""

    __slots__ = ("_keys", "high", "low", "valid")

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self.low = b""
        self.high: bytes | None = None
        self.valid = False

    def __len__(self) -> int:
        return len(self._keys)

    def covers(self, start: bytes) -> bool:
        """Whether the window knows the store's ready entries from ``start`` on (up to
        ``high``)."""
        return self.valid and self.low <= start and (self.high is None or start < self.high)

    def keys_from(self, start: bytes) -> Iterator[bytes]:
        """The window's keys from ``start`` (``covers(start)``), in order."""
        return islice(self._keys, bisect_left(self._keys, start), None)

    def learn(self, begin: bytes, keys: list[bytes], end: bytes | None) -> None:
        """A scan of the store's ready entries read ``keys``: every entry from ``begin``
        up to, excluding, ``end`` (None: to the end of the kind)."""
        if self.valid and self.high is not None and begin == self.high:
            self._keys.extend(keys)
        else:
            self._keys = list(keys)
            self.low = begin
            self.valid = True
        self.high = end
        self._bound()

    def update(self, deleted: Iterable[bytes], put: Iterable[bytes]) -> None:
        """A batch was written: the ready entries it deleted and put."""
        if not self.valid:
            return
        keys = self._keys
        for key in deleted:
            if self._within(key):
                i = bisect_left(keys, key)
                if i < len(keys) and keys[i] == key:
                    del keys[i]
        for key in put:
            if self._within(key):
                i = bisect_left(keys, key)
                if i == len(keys) or keys[i] != key:
                    keys.insert(i, key)
        self._bound()

    def fill(self, keys: Iterator[bytes]) -> None:
        """The store's ready entries from ``high`` on (read after the batch's write):
        as many as the window has room for, and up to the end of the kind if they all
        fit."""
        room = MAX_KEYS - len(self._keys)
        got = list(islice(keys, room + 1))
        if len(got) > room:
            self._keys.extend(got[:room])
            self.high = got[room]
        else:
            self._keys.extend(got)
            self.high = None

    def clear(self) -> None:
        """Forget everything (a write failed)."""
        self._keys = []
        self.low = b""
        self.high = None
        self.valid = False

    def _within(self, key: bytes) -> bool:
        return self.low <= key and (self.high is None or key < self.high)

    def _bound(self) -> None:
        if len(self._keys) > MAX_KEYS:
            self.high = self._keys[MAX_KEYS]
            del self._keys[MAX_KEYS:]


@dataclass(slots=True)
class _Scan:
    """A batch's scan of the store's ready entries: where it began, what it read, and
    whether it read to the end of the kind."""

    begin: bytes
    keys: list[bytes] = field(default_factory=list)
    complete: bool = False


class ReadyReads(IndexScans):
    """How ``QueueBatch`` reads its ready entries: from the writer's ``ReadyWindow``
    where it covers them, else from the store, learning the window (see the module
    docstring)."""

    _batch: TableBatch
    _ready: ReadyWindow
    _ready_scans: list[_Scan]

    def _ready_from(self, cursor: bytes | None) -> Iterator[bytes]:
        """The ready index keys from ``cursor`` (None: the first) on, in order, as the
        store held them when the batch began."""
        start = self._prefix + b"r"
        if cursor is not None and cursor > start:
            start = cursor
        window = self._ready
        if window.covers(start):
            yield from window.keys_from(start)
            if window.high is None:
                return
            start = window.high
        scan = _Scan(start)
        self._ready_scans.append(scan)
        for key in self._entries(b"r", from_key=start):
            scan.keys.append(key)
            yield key
        scan.complete = True

    def _ready_written(self) -> None:
        """The batch was written: the window learns its scans, then its changes."""
        window = self._ready
        for scan in self._ready_scans:
            if scan.complete:
                window.learn(scan.begin, scan.keys, None)
            elif scan.keys:
                window.learn(scan.begin, scan.keys, scan.keys[-1] + b"\x00")
        base = self._prefix + b"r"
        deleted: list[bytes] = []
        put: list[bytes] = []
        for table, key, value in self._batch.ops:
            if table == INDEX_TABLE and key.startswith(base):
                (deleted if value is None else put).append(key)
        window.update(deleted, put)
        if window.valid and window.high is not None and len(window) < MAX_KEYS:
            # the store past the window, read now that this batch is written: so the
            # window reaches the end of the kind, and the entries put there later join
            # it, whenever the ready messages fit
            try:
                window.fill(self._q.index_keys(window.high, stop_key_for_prefix(base)))
            except TmsError:
                window.clear()  # the next batches go to the store, and learn again
