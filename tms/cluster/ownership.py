"""``Cluster``: this instance's membership and its topic ownership in ZooKeeper, fenced
in the shared store. This module is the boundary where kazoo's exceptions become
``ClusterUnavailableError``.

Layout under a base path (default ``/txms/tms``)::

    <base>/instances/<id>        ephemeral: a live instance; data: its URL, or JSON
                                 {"url": URL, "rpc": "tms://host:port"} when it also
                                 serves the binary protocol
    <base>/owners/<ns>.<topic>   ephemeral: the topic's owner; data: the owner's id

**Ownership by ephemeral node** (Hedwig's first option, not its CAS one): ZooKeeper is
already there for membership, and an ephemeral node is released by ZooKeeper itself when
its owner's session ends, so a dead owner's topics are free within one session timeout
with no lease of our own to renew or expire (CAS over the store would need exactly that:
an expiry time written by the owner and judged by other machines' clocks). A topic is
claimed lazily, by the first instance that has to write it (``fence``): it creates the
node, and only then takes the topic's **fence** in the store
(``KeyValueStore.acquire_fence``), which refuses every later write of any earlier owner.
The caller reads the topic's last position after that, so it resumes above everything
stored before, whatever the clocks say.

ZooKeeper alone is not trusted for safety: a paused owner may wake after its session
expired and write. Its writes carry its fence epoch and the store refuses them
(``FencedError``); the service then ``release``s the topic and answers with the new
owner. An instance restarted under the same id takes over its previous life's claims
at once (that session's nodes would last until it expires). Losing the session
(``LOST``, or ``SUSPENDED`` for a whole session timeout) drops every claim at once; when
kazoo reconnects with a new session the instance node is made again.

Contract: ``fence(topic)`` returns this instance's fence for the topic, claiming it if
nobody owns it; raises ``NotOwnerError`` (with the owner's URL) when another instance
does (and its binary address, ``owner_rpc``, when it serves one),
``ClusterUnavailableError`` when ZooKeeper cannot be used, and the store's errors
when the fence cannot be taken (the claim is then given up). ``owns(topic, epoch)``
says whether a fence is still this instance's claim. Thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from tms.errors import ClusterUnavailableError, NotOwnerError
from tms.model import TopicId
from tms.store.kv import Fence, KeyValueStore

__all__ = ["DEFAULT_BASE", "Cluster", "Instance", "connect", "fence_name", "translated"]

log = logging.getLogger(__name__)

DEFAULT_BASE = "/txms/tms"


@dataclass(frozen=True, slots=True)
class Instance:
    """A live instance: its id, the URL it serves, and its binary protocol address
    ("": none)."""

    id: str
    url: str
    rpc: str = ""

    def encode(self) -> bytes:
        """Its instance node's data (a plain URL without a binary address)."""
        if not self.rpc:
            return self.url.encode()
        return json.dumps({"url": self.url, "rpc": self.rpc}, sort_keys=True).encode()

    @classmethod
    def decode(cls, instance_id: str, data: bytes) -> Instance:
        text = bytes(data).decode(errors="replace")
        if text.startswith("{"):
            try:
                fields = json.loads(text)
                return cls(instance_id, str(fields.get("url", "")), str(fields.get("rpc", "")))
            except (ValueError, AttributeError):
                return cls(instance_id, "")
        return cls(instance_id, text)


def fence_name(topic: TopicId) -> bytes:
    """The store's fence of a topic (one per topic, across its generations)."""
    return f"topic/{topic.namespace}.{topic.topic}".encode()


def _described(instance: Instance) -> dict[str, str]:
    found = {"id": instance.id, "url": instance.url}
    if instance.rpc:
        found["rpc"] = instance.rpc
    return found


def _node(topic: TopicId) -> str:
    return f"{topic.namespace}.{topic.topic}"  # '.' is in neither name's alphabet


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """The boundary: kazoo's exceptions become ``ClusterUnavailableError``."""
    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        raise ClusterUnavailableError(f"ZooKeeper: cannot {what}: {exc!r}") from exc


def connect(hosts: str, session_timeout_s: float, connect_s: float = 15.0) -> KazooClient:
    """A started ``KazooClient`` (``ClusterUnavailableError`` when the ensemble cannot be
    reached within ``connect_s``)."""
    client = KazooClient(hosts=hosts, timeout=session_timeout_s)
    try:
        with translated(f"connect to {hosts}"):
            client.start(timeout=connect_s)
    except BaseException:
        client.close()
        raise
    return client


class Cluster:
    """See the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        store: KeyValueStore,
        instance_id: str,
        *,
        base: str = DEFAULT_BASE,
        session_timeout_s: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.instance = Instance(instance_id, "")
        self.base = base
        self._store = store
        self._session_timeout_s = session_timeout_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._owned: dict[TopicId, int] = {}
        self._claiming: dict[TopicId, threading.Lock] = {}
        self._suspended_at: float | None = None
        self._lost = False
        self._started = False
        self._closed = False

    @property
    def instances_path(self) -> str:
        return f"{self.base}/instances"

    @property
    def owners_path(self) -> str:
        return f"{self.base}/owners"

    def start(self, url: str, rpc: str = "") -> None:
        """Register this instance, serving ``url`` (and the binary protocol at ``rpc``)
        (``ClusterUnavailableError`` when it cannot). Topics are claimed only once it is
        registered."""
        self.instance = Instance(self.instance.id, url, rpc)
        with translated("register the instance"):
            self.client.ensure_path(self.owners_path)
            self._register()
        self.client.add_listener(self._on_state)
        self._started = True

    def _register(self) -> None:
        path = f"{self.instances_path}/{self.instance.id}"
        data = self.instance.encode()
        try:
            self.client.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:  # our previous session's node, not gone yet
            self.client.delete(path)
            self.client.create(path, data, ephemeral=True, makepath=True)

    # -- session ------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        """kazoo's listener (on its thread: must not block)."""
        if state == KazooState.LOST:
            self._drop_all("the ZooKeeper session was lost")
            with self._lock:
                self._lost = True
        elif state == KazooState.SUSPENDED:
            self._suspended_at = self._monotonic()
        else:
            self._suspended_at = None
            with self._lock:
                lost, self._lost = self._lost, False
            if lost and not self._closed:
                # a new session: register again, off kazoo's thread
                threading.Thread(target=self._reregister, daemon=True).start()

    def _reregister(self) -> None:
        try:
            with translated("register the instance again"):
                self._register()
            log.info("registered again in a new ZooKeeper session")
        except ClusterUnavailableError as exc:
            log.error("%s", exc)

    def _drop_all(self, why: str) -> None:
        with self._lock:
            dropped, self._owned = self._owned, {}
        if dropped:
            log.warning("%s: giving up %d topic(s)", why, len(dropped))

    def _session_usable(self) -> bool:
        if not self._started or self._closed:
            return False
        since = self._suspended_at
        if since is not None and self._monotonic() - since >= self._session_timeout_s:
            self._drop_all("ZooKeeper unreachable for a whole session timeout")
            return False
        return self.client.state == KazooState.CONNECTED or since is not None

    # -- ownership ----------------------------------------------------------------------

    def owns(self, topic: TopicId, epoch: int) -> bool:
        """Whether ``epoch`` is still this instance's claim of ``topic``."""
        if not self._session_usable():
            return False
        with self._lock:
            return self._owned.get(topic) == epoch

    def fence(self, topic: TopicId) -> Fence:
        """This instance's fence of ``topic``, claiming it if free (see the module
        docstring)."""
        with self._lock:
            epoch = self._owned.get(topic)
            claim = self._claiming.setdefault(topic, threading.Lock())
        if epoch is not None and self._session_usable():
            return fence_name(topic), epoch
        with claim:  # one claim of a topic at a time
            with self._lock:
                epoch = self._owned.get(topic)
            if epoch is not None and self._session_usable():
                return fence_name(topic), epoch
            if not self._session_usable():
                raise ClusterUnavailableError("not connected to ZooKeeper")
            self._claim_node(topic)
            try:
                epoch = self._store.acquire_fence(fence_name(topic))
            except BaseException:
                self._delete_node(topic)
                raise
            with self._lock:
                self._owned[topic] = epoch
            log.info("owning %s (fence epoch %d)", topic, epoch)
            return fence_name(topic), epoch

    def _claim_node(self, topic: TopicId) -> None:
        path = f"{self.owners_path}/{_node(topic)}"
        with translated(f"claim {topic}"):
            try:
                self.client.create(path, self.instance.id.encode(), ephemeral=True)
                return
            except NodeExistsError:
                pass
            try:
                data, stat = self.client.get(path)
            except NoNodeError:  # released meanwhile: the caller tries again
                raise ClusterUnavailableError(f"the owner of {topic} changed; try again") from None
            if stat.ephemeralOwner == self.client.client_id[0]:
                return  # ours already (a claim whose fence failed, or was refused)
            owner = data.decode(errors="replace")
            if owner == self.instance.id:
                # This instance's previous life (killed, restarted under the same id):
                # its node lasts until that session expires; take it now (its writes,
                # if it were somehow alive, are refused by the fence taken next).
                with contextlib.suppress(NoNodeError):
                    self.client.delete(path, version=stat.version)
                self.client.create(path, self.instance.id.encode(), ephemeral=True)
                return
        found = self.instance_of(owner)
        raise NotOwnerError(f"{topic} is owned by instance {owner!r}", found.url, found.rpc)

    def claimed(self, topic: TopicId) -> bool:
        """Whether this instance holds a claim of ``topic`` (in memory: no ZooKeeper
        read)."""
        with self._lock:
            held = topic in self._owned
        return held and self._session_usable()

    def held_elsewhere(self, topic: TopicId) -> bool:
        """Whether another instance's session holds ``topic``'s owner node (one read;
        ``ClusterUnavailableError`` when ZooKeeper cannot be read)."""
        with translated(f"read the owner of {topic}"):
            stat = self.client.exists(f"{self.owners_path}/{_node(topic)}")
        return stat is not None and stat.ephemeralOwner != self.client.client_id[0]

    def release(self, topic: TopicId, epoch: int) -> None:
        """Give up ``topic`` if ``epoch`` is still the claim (its fence was refused)."""
        with self._lock:
            if self._owned.get(topic) != epoch:
                return
            del self._owned[topic]
        log.warning("no longer owning %s (fence epoch %d was superseded)", topic, epoch)
        self._delete_node(topic)

    def _delete_node(self, topic: TopicId) -> None:
        path = f"{self.owners_path}/{_node(topic)}"
        with contextlib.suppress(KazooException, KazooTimeoutError):
            _data, stat = self.client.get(path)
            if stat.ephemeralOwner == self.client.client_id[0]:
                self.client.delete(path, version=stat.version)

    # -- membership ---------------------------------------------------------------------

    def instance_of(self, instance_id: str) -> Instance:
        """What a live instance registered (its url "" when it is not registered)."""
        with translated(f"read instance {instance_id}"):
            try:
                data, _stat = self.client.get(f"{self.instances_path}/{instance_id}")
            except NoNodeError:
                return Instance(instance_id, "")
        return Instance.decode(instance_id, data)

    def url_of(self, instance_id: str) -> str:
        """The URL a live instance registered ("" when it is not registered)."""
        return self.instance_of(instance_id).url

    def instances(self) -> list[Instance]:
        """The live instances, by id."""
        with translated("list the instances"):
            ids = sorted(self.client.get_children(self.instances_path))
        found = [self.instance_of(i) for i in ids]
        return [i for i in found if i.url]

    def owners(self) -> dict[str, str]:
        """Topic node (``ns.topic``) -> owning instance id, for every owned topic."""
        with translated("list the owners"):
            nodes = self.client.get_children(self.owners_path)
            result = {}
            for node in nodes:
                with contextlib.suppress(NoNodeError):
                    data, _stat = self.client.get(f"{self.owners_path}/{node}")
                    result[node] = data.decode(errors="replace")
        return dict(sorted(result.items()))

    def describe(self) -> dict[str, Any]:
        """This instance, the live instances and the topics' owners (``/v1/cluster``)."""
        return {
            "mode": "cluster",
            "self": _described(self.instance),
            "instances": [_described(i) for i in self.instances()],
            "owners": self.owners(),
        }

    def owned(self) -> list[TopicId]:
        with self._lock:
            return sorted(self._owned, key=str)

    def close(self) -> None:
        """Give up every topic and leave (the session's end removes the nodes)."""
        self._closed = True
        self._drop_all("closing")
        with contextlib.suppress(Exception):
            self.client.remove_listener(self._on_state)
        with contextlib.suppress(Exception):
            self.client.stop()
        self.client.close()
