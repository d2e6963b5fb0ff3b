"""``Ownership``: which topics a service instance may write, when several instances
share one store (``tms.cluster.Cluster`` is the ZooKeeper one). ``MessagingService``
asks it for a topic's *fence* before it opens the topic's writer or changes the topic,
and every write it makes of the topic carries that fence (``tms.store.kv``)."""

from __future__ import annotations

from typing import Any, Protocol

from tms.model import TopicId
from tms.store.kv import Fence

__all__ = ["Ownership"]


class Ownership(Protocol):
    """Which topics this instance may write (``tms.cluster.Cluster``)."""

    def fence(self, topic: TopicId) -> Fence:
        """This instance's fence of ``topic``, claiming it if free; ``NotOwnerError``
        when another instance owns it."""
        ...

    def owns(self, topic: TopicId, epoch: int) -> bool:
        """Whether ``epoch`` is still this instance's claim of ``topic``."""
        ...

    def release(self, topic: TopicId, epoch: int) -> None:
        """Give up ``topic`` (its fence ``epoch`` was refused by the store)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The cluster as this instance sees it (JSON: ``GET /v1/cluster``)."""
        ...
