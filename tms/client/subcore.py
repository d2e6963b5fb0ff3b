"""The sans-I/O core of the at-least-once subscribers, ``tms.client.subscriber``
(threads) and ``tms.aio.subscriber`` (asyncio): the position bookkeeping both keep, with
no requests, sleeps or clocks in it (the shells pass ``now``).

``Cursor`` holds where processing stands (``done``: everything before it processed),
what was last committed and under which version, when, a commit sent without an answer
(``unsure``), and the newest version known durable (``durable``: a commit answered before
it was durable, ``commit_later``, stays behind it until made durable). It says when a
commit is due (riding on the next poll), what a poll's answer or its failure changes, what
a read of the subscription after an unanswered commit means (``recovered``), and where a
reload or a commit leaves it. The shells poll, read, commit, sleep and manage the read
transactions.
"""

from __future__ import annotations

from tms.client.subscriptions import SubscriptionBatch, SubscriptionInfo
from tms.errors import TmsTransientError
from tms.ids import MessageId

__all__ = ["Cursor"]


class Cursor:
    """See the module docstring. Not thread-safe: one subscriber's."""

    __slots__ = (
        "committed",
        "committed_at",
        "done",
        "durable",
        "interval",
        "unsure",
        "version",
    )

    def __init__(self, commit_interval_s: float, now: float) -> None:
        self.interval = commit_interval_s
        self.done = self.committed = MessageId(0, 0)
        self.version = self.durable = 0
        self.committed_at = now
        self.unsure: MessageId | None = None  # a commit sent without an answer

    def processed(self, position: MessageId) -> None:
        """Everything before ``position`` is processed too."""
        self.done = max(self.done, position)

    def due(self, now: float) -> bool:
        """Whether the next poll carries a commit: something new is processed and
        ``commit_interval_s`` has passed since the last commit."""
        return self.done != self.committed and now - self.committed_at >= self.interval

    def unanswered(self, due: bool) -> None:
        """A poll got no answer; with ``due`` its commit may have been written."""
        if due:
            self.unsure = self.done

    def answered(self, batch: SubscriptionBatch, due: bool, now: float) -> None:
        """A poll was answered (its commit, with ``due``, is written — even when its read
        failed); a read that failed for good is raised, a transient one left to the
        shell to retry after a pause (``batch.read_error``)."""
        if due:
            self.committed, self.committed_at = self.done, now
        self.version = batch.version
        self.durable = batch.version if batch.durable_version is None else batch.durable_version
        if batch.read_error is not None and not isinstance(batch.read_error, TmsTransientError):
            raise batch.read_error

    def recovered(self, info: SubscriptionInfo, now: float) -> bool:
        """After an unanswered commit, the subscription as read now: True when someone
        else moved it (the shell reloads from ``info``); else the commit was written
        (go on from it) or not (the next poll commits it)."""
        target, self.unsure = self.unsure, None
        if info.version == self.version:
            return False  # not written: the next poll commits it
        if info.position == target:
            self.committed, self.version = info.position, info.version
            self.durable = info.version
            self.committed_at = now
            return False
        return True

    def reloaded(self, info: SubscriptionInfo, now: float) -> None:
        """Go on from the subscription's stored position."""
        self.done = self.committed = info.position
        self.version = self.durable = info.version
        self.committed_at = now

    def commit_written(self, info: SubscriptionInfo, now: float) -> None:
        """A commit of ``done`` was answered with ``info``."""
        self.committed, self.version = self.done, info.version
        self.durable = info.version
        self.committed_at = now

    def settled(self) -> bool:
        """Whether nothing is left to commit: the processed position is committed, and
        durable (a commit answered before it was durable is made durable again)."""
        return self.done == self.committed and self.durable >= self.version
