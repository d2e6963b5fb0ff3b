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

import threading
from typing import Protocol

from tms.codec.subscriptions import (
    decode_record,
    encode_record,
    subscription_from_key,
    subscription_key,
    topic_subscriptions_prefix,
)
from tms.errors import BadVersionError, SubscriptionExistsError, SubscriptionNotFoundError
from tms.model import TopicId
from tms.store.kv import KeyValueStore
from tms.subscription import SubscriptionData, SubscriptionId, Versioned

__all__ = ["SUBSCRIPTION_TABLE", "KvSubscriptionStore", "SubscriptionStore"]

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


def _bad_version(sub: SubscriptionId, expected: int, actual: int) -> BadVersionError:
    return BadVersionError(
        f"subscription {sub} is at version {actual}, not {expected}: it changed since it was read",
        expected=expected,
        actual=actual,
    )


class KvSubscriptionStore:
    """See ``SubscriptionStore``. One record per row of table ``s`` of a
    ``KeyValueStore`` (``tms.codec.subscriptions``); compare-and-set under a lock (one
    process owns the embedded store), each change one synced write that is refused if
    the store recovered from a failure since the record was read (``epoch``)."""

    def __init__(self, kv: KeyValueStore) -> None:
        self._table = kv.table(SUBSCRIPTION_TABLE)
        self._lock = threading.Lock()

    def read(self, sub: SubscriptionId) -> Versioned | None:
        value = self._table.get(subscription_key(sub))
        return decode_record(value) if value is not None else None

    def create(self, sub: SubscriptionId, data: SubscriptionData) -> int:
        key = subscription_key(sub)
        with self._lock:
            epoch = self._table.epoch
            if self._table.get(key) is not None:
                raise SubscriptionExistsError(sub)
            self._table.write([(key, encode_record(data, 1))], epoch=epoch)
        return 1

    def write(self, sub: SubscriptionId, data: SubscriptionData, version: int) -> int:
        key = subscription_key(sub)
        with self._lock:
            epoch = self._table.epoch
            current = self._current(sub, key, version)
            new_version = current + 1
            self._table.write([(key, encode_record(data, new_version))], epoch=epoch)
        return new_version

    def delete(self, sub: SubscriptionId, version: int) -> None:
        key = subscription_key(sub)
        with self._lock:
            epoch = self._table.epoch
            self._current(sub, key, version)
            self._table.write(deletes=[key], epoch=epoch)

    def _current(self, sub: SubscriptionId, key: bytes, version: int) -> int:
        value = self._table.get(key)
        if value is None:
            raise SubscriptionNotFoundError(sub)
        current = decode_record(value).version
        if current != version:
            raise _bad_version(sub, version, current)
        return current

    def list(self, topic: TopicId) -> list[tuple[str, Versioned]]:
        prefix = topic_subscriptions_prefix(topic)
        stop = prefix[:-1] + b";"  # ':' + 1: names contain no ':'
        return [
            (subscription_from_key(key).name, decode_record(value))
            for key, value in self._table.scan(prefix, stop)
        ]
