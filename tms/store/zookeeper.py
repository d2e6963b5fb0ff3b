"""``ZkSubscriptionStore``: the ``SubscriptionStore`` on ZooKeeper (Hedwig's default
subscription metadata store), for several service instances sharing one deployment. This
module is the boundary where kazoo's exceptions become the store's errors.

Layout under a base path (``tms serve``: ``<zk-path>/subscriptions``)::

    <base>/<namespace>.<topic>/<name>   persistent znode; data: ``encode_data``'s JSON

**Versions are ZooKeeper's.** The record's version is the znode's ``dataVersion`` + 1
(the contract wants positive versions; ZooKeeper starts at 0), and every change is one
conditional ZooKeeper operation — ``set``/``delete`` with the expected version — so the
compare-and-set holds across every instance and process, with no lock of our own. A
deleted and recreated record starts at version 1 again, as the contract allows (the
state's ``stamp`` tells incarnations apart).

**What lives here and what does not.** Only the record (preferences and the state: the
position of non-transactional commits and seeks, the generation and the stamp). A
position committed *inside a transaction* (``tms.positions``) is a row of the shared
message store, written by the topic's fenced writer under the transaction's write
pointer: it must commit or vanish with the transaction's messages, and be filtered by
the same visibility rules, which ZooKeeper cannot do atomically with PostgreSQL.

**Errors.** ``NodeExistsError``/``NoNodeError``/``BadVersionError`` become the
contract's ``SubscriptionExistsError``/``SubscriptionNotFoundError``/
``BadVersionError``; anything else kazoo raises (connection loss, session expiry,
timeouts) becomes ``StorageUnavailableError``: a change's outcome is then unknown.
Reads and listings are retried across a lost connection (kazoo's retry); changes are
not (a retried ``create`` whose first attempt landed would report "exists").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError as KazooBadVersionError
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from tms.codec.subscriptions import decode_data, encode_data
from tms.errors import (
    BadVersionError,
    StorageUnavailableError,
    SubscriptionExistsError,
    SubscriptionNotFoundError,
)
from tms.model import TopicId
from tms.subscription import SubscriptionData, SubscriptionId, Versioned

__all__ = ["ZkSubscriptionStore"]

_CREATE_ATTEMPTS = 5


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """kazoo's failures (other than the ones a method maps itself) as
    ``StorageUnavailableError``."""
    try:
        yield
    except (KazooException, KazooTimeoutError, RetryFailedError) as exc:
        raise StorageUnavailableError(f"ZooKeeper: cannot {what}: {exc!r}") from exc


class ZkSubscriptionStore:
    """See ``tms.store.subscriptions.SubscriptionStore`` and the module docstring."""

    def __init__(self, client: KazooClient, base: str, *, retry: KazooRetry | None = None) -> None:
        """``client``: started (shared with the cluster's membership); ``base``: the
        absolute path under which the records live (created when first needed)."""
        self._client = client
        self._base = base.rstrip("/")
        self._retry = retry or KazooRetry(max_tries=3, delay=0.1, max_delay=1.0)

    def _topic_path(self, topic: TopicId) -> str:
        # '.' is in neither name's alphabet, so the node names one topic only
        return f"{self._base}/{topic.namespace}.{topic.topic}"

    def _path(self, sub: SubscriptionId) -> str:
        return f"{self._topic_path(sub.topic)}/{sub.name}"

    def read(self, sub: SubscriptionId) -> Versioned | None:
        with _translated(f"read subscription {sub}"):
            try:
                value, stat = self._retry(self._client.get, self._path(sub))
            except NoNodeError:
                return None
        return Versioned(decode_data(bytes(value)), stat.version + 1)

    def create(self, sub: SubscriptionId, data: SubscriptionData) -> int:
        path, value = self._path(sub), encode_data(data)
        with _translated(f"create subscription {sub}"):
            for _ in range(_CREATE_ATTEMPTS):
                try:
                    self._client.create(path, value)
                    return 1
                except NodeExistsError:
                    raise SubscriptionExistsError(sub) from None
                except NoNodeError:  # no topic node yet (or removed by a delete meanwhile)
                    with contextlib.suppress(NodeExistsError):
                        self._client.create(self._topic_path(sub.topic), b"", makepath=True)
        raise StorageUnavailableError(
            f"ZooKeeper: cannot create subscription {sub}: its parent node keeps disappearing"
        )

    def write(self, sub: SubscriptionId, data: SubscriptionData, version: int) -> int:
        with _translated(f"write subscription {sub}"):
            try:
                stat = self._client.set(self._path(sub), encode_data(data), version=version - 1)
            except NoNodeError:
                raise SubscriptionNotFoundError(sub) from None
            except KazooBadVersionError:
                raise self._bad_version(sub, version) from None
        return int(stat.version) + 1

    def delete(self, sub: SubscriptionId, version: int) -> None:
        with _translated(f"delete subscription {sub}"):
            try:
                self._client.delete(self._path(sub), version=version - 1)
            except NoNodeError:
                raise SubscriptionNotFoundError(sub) from None
            except KazooBadVersionError:
                raise self._bad_version(sub, version) from None
            # the topic's node goes with its last record (a concurrent create makes it again)
            with contextlib.suppress(NotEmptyError, NoNodeError):
                self._client.delete(self._topic_path(sub.topic))

    def _bad_version(self, sub: SubscriptionId, expected: int) -> BadVersionError:
        current = self.read(sub)
        actual = current.version if current is not None else None
        return BadVersionError(
            f"subscription {sub} is at version {actual}, not {expected}: it changed since it "
            "was read",
            expected=expected,
            actual=actual,
        )

    def list(self, topic: TopicId) -> list[tuple[str, Versioned]]:
        found = []
        with _translated(f"list the subscriptions of {topic}"):
            try:
                names = self._retry(self._client.get_children, self._topic_path(topic))
            except NoNodeError:
                return []
        for name in sorted(names):
            record = self.read(SubscriptionId(topic, name))
            if record is not None:  # deleted meanwhile: not listed
                found.append((name, record))
        return found
