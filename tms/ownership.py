"""``Ownership``: which topics a service instance may write, when several instances
share one store (``tms.cluster.Cluster`` is the ZooKeeper one). ``MessagingService``
asks it for a topic's *fence* before it opens the topic's writer or changes the topic,
and every write it makes of the topic carries that fence (``tms.store.kv``): another
instance gets ``NotOwnerError`` (naming the owner). The fence is taken before the writer
reads the topic's last position, so a new owner continues above everything stored; a
write the store refuses for a superseded fence (``FencedError``, 503) gives the topic
up. The functions below are how the service applies that."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from tms.errors import FencedError
from tms.model import TopicId
from tms.store.kv import Fence

if TYPE_CHECKING:
    from tms.writer import TopicWriter

__all__ = ["Ownership", "fenced", "given_up", "stale"]


class Ownership(Protocol):
    """Which topics this instance may write (``tms.cluster.Cluster``)."""

    def fence(self, topic: TopicId) -> Fence:
        """This instance's fence of ``topic``, claiming it if free; ``NotOwnerError``
        when another instance owns it."""
        ...

    def owns(self, topic: TopicId, epoch: int) -> bool:
        """Whether ``epoch`` is still this instance's claim of ``topic``."""
        ...

    def claimed(self, topic: TopicId) -> bool:
        """Whether this instance holds a claim of ``topic`` now (what it knows; no
        question asked of anyone)."""
        ...

    def held_elsewhere(self, topic: TopicId) -> bool:
        """Whether another live instance owns ``topic`` now (never claims it): the
        housekeeping of a topic that is runs there, not here."""
        ...

    def release(self, topic: TopicId, epoch: int) -> None:
        """Give up ``topic`` (its fence ``epoch`` was refused by the store)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The cluster as this instance sees it (JSON: ``GET /v1/cluster``)."""
        ...


@contextlib.contextmanager
def fenced(ownership: Ownership | None, topic: TopicId) -> Iterator[Fence | None]:
    """This instance's fence of ``topic`` for a change (None: no ownership); a refused
    fence gives the topic up."""
    if ownership is None:
        yield None
        return
    fence = ownership.fence(topic)
    try:
        yield fence
    except FencedError:
        ownership.release(topic, fence[1])
        raise


def stale(writer: TopicWriter, ownership: Ownership | None) -> bool:
    """Whether ``writer`` may no longer write: the store recovered since it was made, or
    its fence is no longer this instance's claim."""
    if writer.stale:
        return True
    fence = writer.fence
    return fence is not None and not (
        ownership is not None and ownership.owns(writer.metadata.topic, fence[1])
    )


def given_up(ownership: Ownership | None, writer: TopicWriter) -> None:
    """``writer``'s fence was refused: give its topic up."""
    if ownership is not None and writer.fence is not None:
        ownership.release(writer.metadata.topic, writer.fence[1])
