"""``SubscriptionStore``: the contract of the store of subscription metadata, and
``KvSubscriptionStore``, its implementation on the embedded ``KeyValueStore``.

The service keeps each subscription's preferences and state (``tms.subscription``) in a
store of its own, after Hedwig's ``SubscriptionDataManager``: any key/value store with a
compare-and-set can hold them (a coordination service, a shared database), and the
service uses nothing but this contract. Records are opaque to the store (Hedwig's
``isPartialUpdateSupported() == false``): it keeps ``SubscriptionData`` whole.
``tests/tms/store/test_subscription_store.py`` is the contract's test suite, run on every
implementation (one fixture parameter each).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tms.codec.subscriptions import (
    decode_record,
    encode_record,
    subscription_from_key,
    subscription_key,
    topic_subscriptions_prefix,
)
from tms.errors import (
    BadVersionError,
    StorageUnavailableError,
    SubscriptionExistsError,
    SubscriptionNotFoundError,
)
from tms.model import TopicId
from tms.store.kv import KeyValueStore
from tms.subscription import SubscriptionData, SubscriptionId, Versioned

__all__ = [
    "SUBSCRIPTION_TABLE",
    "KvSubscriptionStore",
    "Staged",
    "StagingSubscriptionStore",
    "SubscriptionStore",
]

SUBSCRIPTION_TABLE = b"s"


class SubscriptionStore(Protocol):
    """The metadata of subscriptions: one record (``SubscriptionData``) per
    ``SubscriptionId``, each with a **version**, updated by compare-and-set.

    Operations (each atomic; the first three ``SubscriptionId`` arguments name the
    record):

    * ``read(sub)`` — the record and its current version, or None if there is none.
    * ``create(sub, data)`` — add a record; returns its first version. Raises
      ``SubscriptionExistsError`` if the record exists (and changes nothing).
    * ``write(sub, data, version)`` — replace the record if its current version is
      ``version``; returns the new version. Raises ``BadVersionError`` (``expected`` =
      ``version``, ``actual`` = the current one when known) if the version differs, and
      ``SubscriptionNotFoundError`` if there is no record; either way nothing changes.
    * ``delete(sub, version)`` — remove the record if its current version is
      ``version``; ``BadVersionError`` and ``SubscriptionNotFoundError`` as for
      ``write``.
    * ``list(topic)`` — every record of ``topic`` (whatever generation its state names)
      as ``(name, Versioned)``, sorted by name; empty if there are none.

    Guarantees:

    * **Versions** are positive integers. Every successful ``write`` gives the record a
      version different from every version it had since it was created, so an update
      from a stale read always fails. After a ``delete``, a later ``create`` may start
      the versions again (ZooKeeper does): the state's ``stamp`` tells incarnations
      apart, not the version.
    * **Durability**: a call that returned has taken effect and survives a crash of the
      process (and of the machine, where the medium syncs); a call that raised
      ``SubscriptionExistsError``, ``SubscriptionNotFoundError`` or ``BadVersionError``
      took no effect.
    * **Unknown outcomes**: a call that raised ``StorageUnavailableError`` (the medium
      failed, or the store cannot be reached) may or may not have taken effect; read the
      record again before deciding what to do.
    * **Reads** see every write that returned before they started (linearizable per
      record); ``list`` need not be one snapshot across records.
    * Thread-safe; nothing but ``StorageUnavailableError`` and the errors above is
      raised: an implementation maps its engine's errors at its own boundary
      (``raise … from exc``).
    """

    def read(self, sub: SubscriptionId) -> Versioned | None: ...

    def create(self, sub: SubscriptionId, data: SubscriptionData) -> int: ...

    def write(self, sub: SubscriptionId, data: SubscriptionData, version: int) -> int: ...

    def delete(self, sub: SubscriptionId, version: int) -> None: ...

    def list(self, topic: TopicId) -> list[tuple[str, Versioned]]: ...


@runtime_checkable
class StagingSubscriptionStore(SubscriptionStore, Protocol):
    """A ``SubscriptionStore`` whose ``write`` comes in two steps, so that a caller can
    go on before the change is durable (a commit riding on a poll that is answered at
    once, ``Subscriptions.read``'s ``commit_later``):

    * ``stage(sub, data, version)`` — check the change (compare-and-set against the
      record as every change staged before it leaves it; the errors of ``write``) and
      accept it; returns a ``Staged`` with its new version. Changes of one record are
      made durable in the order they were staged (each carries the whole record).
    * ``settle(staged)`` — return once the staged change is durable (``write``'s
      durability), or raise what its write raised (``StorageUnavailableError``).

    ``write(sub, data, version)`` is ``settle(stage(sub, data, version))``. ``read``
    still sees only what is durable."""

    def stage(self, sub: SubscriptionId, data: SubscriptionData, version: int) -> Staged: ...

    def settle(self, staged: Staged) -> int: ...


def _bad_version(sub: SubscriptionId, expected: int, actual: int) -> BadVersionError:
    return BadVersionError(
        f"subscription {sub} is at version {actual}, not {expected}: it changed since it was read",
        expected=expected,
        actual=actual,
    )


@dataclass(slots=True)
class _Batch:
    """Changes that share one synced write: key -> (version, encoded record), or
    (0, None) to delete; ``epoch``: the store's when the oldest change was checked."""

    epoch: int
    changes: dict[bytes, tuple[int, bytes | None]] = field(default_factory=dict)
    done: bool = False
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class Staged:
    """A change accepted by ``StagingSubscriptionStore.stage``: the record's new
    ``version``, and the store's handle of the write that carries it."""

    version: int
    batch: object


class KvSubscriptionStore:
    """See ``SubscriptionStore``. One record per row of table ``s`` of a
    ``KeyValueStore`` (``tms.codec.subscriptions``).

    **Group commit.** A change is checked (compare-and-set) under a lock against the
    record as the changes already accepted leave it — the batch being gathered, then the
    batch being written, then the table — and joins the batch being gathered. One caller
    at a time writes a batch, in one synced write: changes that arrive while a write is
    under way share the next one. Each call returns only once its batch is durable, and
    raises what the write raised if it failed. A batch carries the ``epoch`` read when it
    was started, so once the store recovered from a failed write, a batch gathered
    before (whose changes may have been checked against the failed one) is refused, not
    written. Reads see the table: every change that returned, none whose write may still
    fail. ``syncs`` and ``changes`` count the writes done and the changes they carried."""

    def __init__(self, kv: KeyValueStore) -> None:
        self._kv = kv
        self._table = kv.table(SUBSCRIPTION_TABLE)
        self._cond = threading.Condition(threading.Lock())
        self._gathering: _Batch | None = None
        self._writing: _Batch | None = None
        self.syncs = 0
        self.changes = 0

    @property
    def local_reads(self) -> bool:
        """Whether a read now is answered by this process alone (its store's
        ``local_reads``): short enough for an event loop's thread."""
        return bool(getattr(self._kv, "local_reads", False))

    @property
    def gathered(self) -> int:
        """How many changes wait for the next write."""
        with self._cond:
            return len(self._gathering.changes) if self._gathering is not None else 0

    def read(self, sub: SubscriptionId) -> Versioned | None:
        value = self._table.get(subscription_key(sub))
        return decode_record(value) if value is not None else None

    def create(self, sub: SubscriptionId, data: SubscriptionData) -> int:
        key = subscription_key(sub)
        with self._cond:
            epoch = self._table.epoch
            if self._version(key) is not None:
                raise SubscriptionExistsError(sub)
            batch = self._join(epoch, key, 1, encode_record(data, 1))
        self._wait(batch)
        return 1

    def write(self, sub: SubscriptionId, data: SubscriptionData, version: int) -> int:
        return self.settle(self.stage(sub, data, version))

    def stage(self, sub: SubscriptionId, data: SubscriptionData, version: int) -> Staged:
        """See ``StagingSubscriptionStore``: the change joins the batch being gathered."""
        key = subscription_key(sub)
        with self._cond:
            epoch = self._table.epoch
            new_version = self._current(sub, key, version) + 1
            batch = self._join(epoch, key, new_version, encode_record(data, new_version))
        return Staged(new_version, batch)

    def settle(self, staged: Staged) -> int:
        """See ``StagingSubscriptionStore``: waits for (or writes) the staged batch."""
        assert isinstance(staged.batch, _Batch)
        self._wait(staged.batch)
        return staged.version

    def delete(self, sub: SubscriptionId, version: int) -> None:
        key = subscription_key(sub)
        with self._cond:
            epoch = self._table.epoch
            self._current(sub, key, version)
            batch = self._join(epoch, key, 0, None)
        self._wait(batch)

    def _version(self, key: bytes) -> int | None:
        """The record's version once the accepted changes are written (None: none)."""
        for batch in (self._gathering, self._writing):
            if batch is not None and key in batch.changes:
                version, value = batch.changes[key]
                return version if value is not None else None
        value = self._table.get(key)
        return decode_record(value).version if value is not None else None

    def _current(self, sub: SubscriptionId, key: bytes, version: int) -> int:
        current = self._version(key)
        if current is None:
            raise SubscriptionNotFoundError(sub)
        if current != version:
            raise _bad_version(sub, version, current)
        return current

    def _join(self, epoch: int, key: bytes, version: int, value: bytes | None) -> _Batch:
        """Add a change checked at ``epoch`` to the batch being gathered (under the
        lock); the batch keeps the oldest epoch of its checks."""
        if self._gathering is None:
            self._gathering = _Batch(epoch)
        batch = self._gathering
        batch.epoch = min(batch.epoch, epoch)
        batch.changes[key] = (version, value)
        return batch

    def _wait(self, batch: _Batch) -> None:
        """Return once ``batch`` is durable (writing it when no one else is writing);
        raise what its write raised."""
        with self._cond:
            while not batch.done and self._writing is not None:
                self._cond.wait()
            leader = not batch.done
            if leader:  # no write under way and no one took it: it is the one gathering
                self._writing, self._gathering = batch, None
        if leader:
            self._flush(batch)
        if batch.error is not None:
            raise batch.error

    def _flush(self, batch: _Batch) -> None:
        puts = [(k, v) for k, (_, v) in batch.changes.items() if v is not None]
        deletes = [k for k, (_, v) in batch.changes.items() if v is None]
        try:
            self._table.write(puts, deletes, epoch=batch.epoch)
        except Exception as exc:  # every caller of the batch raises it
            batch.error = exc
        finally:
            with self._cond:
                if batch.error is None and sys.exc_info()[0] is not None:
                    batch.error = StorageUnavailableError("the write was interrupted")
                batch.done = True
                self._writing = None
                if batch.error is None:
                    self.syncs += 1
                    self.changes += len(batch.changes)
                self._cond.notify_all()

    def list(self, topic: TopicId) -> list[tuple[str, Versioned]]:
        prefix = topic_subscriptions_prefix(topic)
        stop = prefix[:-1] + b";"  # ':' + 1: names contain no ':'
        return [
            (subscription_from_key(key).name, decode_record(value))
            for key, value in self._table.scan(prefix, stop)
        ]
