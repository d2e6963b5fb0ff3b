"""``ZooKeeperLeader``: the client's view of which server leads (``Endpoints`` for
``ThriftTxClient("zk://h1:p1,h2:p2/base")``).

A ZooKeeper session is opened on first use; a watch on ``<base>/leader`` keeps the
address current. While no leader is published (a failover in progress), ``current``
waits for one, up to its timeout. A retry's pause ends early when a new leader is
published, so a client resumes as soon as the new leader serves, not at the end of a
backoff step.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import DataWatch

from txn.errors import TxServiceUnavailableError
from txn.ha.zk import DEFAULT_SESSION_TIMEOUT_S, ZkTarget, parse_leader, session, translated
from txn.rpc.endpoints import Address

__all__ = ["ZooKeeperLeader"]


class ZooKeeperLeader:
    """See the module docstring and ``txn.rpc.endpoints.Endpoints``."""

    def __init__(self, target: ZkTarget, session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S):
        self.target = target
        self._session_timeout_s = session_timeout_s
        self._cond = threading.Condition(threading.Lock())
        self._address: Address | None = None
        self._client: KazooClient | None = None
        self._closed = False

    @classmethod
    def from_url(cls, url: str) -> ZooKeeperLeader:
        return cls(ZkTarget.from_url(url))

    def _ensure_watching(self) -> None:
        with self._cond:
            if self._client is not None or self._closed:
                return
            client = session(self.target, self._session_timeout_s)
            self._client = client
        with translated(f"watch {self.target.leader_path}"):
            DataWatch(client, self.target.leader_path, self._on_change)

    def _on_change(self, data: bytes | None, _stat: Any) -> bool:
        with self._cond:
            self._address = None if data is None else parse_leader(data)
            self._cond.notify_all()
            return not self._closed  # False ends the watch

    def current(self, timeout_s: float) -> Address:
        self._ensure_watching()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._address is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    raise TxServiceUnavailableError(
                        f"no transaction server leads in {self.target.url} "
                        f"(waited {timeout_s:.1f} s)"
                    )
                self._cond.wait(remaining)
            return self._address

    def failed(self, address: Address) -> None:
        pass  # the leader node changes when the leader does; nothing to rotate

    def pause(self, address: Address, delay_s: float) -> bool:
        deadline = time.monotonic() + delay_s
        with self._cond:
            while self._address in (None, address) and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        return True

    def describe(self) -> str:
        return self.target.url

    def close(self) -> None:
        with self._cond:
            self._closed = True
            client, self._client = self._client, None
            self._cond.notify_all()
        if client is not None:
            client.stop()
            client.close()
