"""``RidingCommits``: a subscription's commit riding on its poll (a part of
``Subscriptions``: ``Subscriptions.read`` with ``commit_version``).

Contract (thread-safe):

* ``read(..., later=False)``: the commit is checked against the durable record, then
  written (synced) by a thread of its own while the read goes on from the record being
  written; the answer waits for both, so an answered commit is durable, and a failed
  write fails the poll. A read that fails once the write is durable answers the commit,
  without messages, with ``SubscriptionPoll.read_error``.
* ``read(..., later=True)`` (on a ``StagingSubscriptionStore``; on another store it is
  ``later=False``): the commit is checked against the record as the commits accepted
  so far leave it, staged (the store's compare-and-set), and the read answers without
  waiting for its write; ``SubscriptionPoll.durable_version`` is the version durable
  when it was accepted. The write starts ``TmsConfig.commit_later_ms`` later (at once
  when something waits for it), so that the commits of the polls that follow replace
  it in the same synced write. A write that fails loses the commit (the record stays
  as it was, and a commit from the version answered gets ``BadVersionError``).
* ``settled(sub)``: returns once no commit of ``sub`` answered before its write is
  still being written (``Subscriptions.record`` calls it: every other operation sees,
  and checks versions against, only what is durable).
* ``close()``: writes what is pending at once and waits for every write.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tms.errors import TmsError
from tms.ids import MessageId
from tms.model import TopicMetadata
from tms.store.subscriptions import Staged, StagingSubscriptionStore
from tms.subnowait import may_wait
from tms.subread import SubscriptionPoll, read_subscription
from tms.subscription import SubscriptionData, SubscriptionId, Versioned
from txn.transaction import Transaction

if TYPE_CHECKING:
    from tms.subscriptions import Subscriptions

__all__ = ["COMMIT_WRITERS", "RidingCommits"]

log = logging.getLogger(__name__)

COMMIT_WRITERS = 64  # threads writing commits that ride on polls (at most the HTTP workers)


@dataclass(slots=True)
class _Pending:
    """Commits of one subscription answered before their writes were durable, and the
    one write that makes the latest durable: the record the latest makes (``staged``
    by the store), the version durable when the first was accepted, and the write
    (``writing`` once it has taken ``staged``; a commit accepted after that starts the
    next ``_Pending``). Changed under ``RidingCommits._lock``."""

    record: Versioned
    staged: Staged
    durable: int
    write: Future[int] = field(default_factory=Future)
    hurry: threading.Event = field(default_factory=threading.Event)  # write at once
    writing: bool = False


def _failed(sub: SubscriptionId, exc: Exception) -> TmsError:
    log.warning("subscription %s: read failed after its commit: %s", sub, exc)
    return exc if isinstance(exc, TmsError) else TmsError(f"the read failed: {exc}")


class RidingCommits:
    """See the module docstring."""

    def __init__(self, subs: Subscriptions) -> None:
        self._subs = subs
        # (a Protocol's isinstance costs ~15 us: asked once)
        store = subs.store
        self._staging = store if isinstance(store, StagingSubscriptionStore) else None
        # many threads, so that many polls' records share a synced write (the store's
        # group commit)
        self._writes = ThreadPoolExecutor(COMMIT_WRITERS, thread_name_prefix="tms-sub-commit")
        self._pending: dict[SubscriptionId, _Pending] = {}  # commits not yet known durable
        self._lock = threading.Lock()

    def settled(self, sub: SubscriptionId) -> None:
        with self._lock:
            pending = self._pending.get(sub)
        if pending is not None:
            if not pending.write.done():
                may_wait("a commit's synced write")
            pending.hurry.set()
            wait_for([pending.write])

    def read(
        self,
        sub: SubscriptionId,
        start_from: MessageId,
        limit: int,
        transaction: Transaction | None,
        commit_version: int,
        *,
        later: bool,
    ) -> SubscriptionPoll:
        store = self._subs.store
        if later and self._staging is not None:
            return self._read_later(
                self._staging, sub, start_from, limit, transaction, commit_version
            )
        metadata, record = self._subs.record(sub)
        data = self._subs.checked_move(
            sub, metadata, record, start_from, version=commit_version, transaction=transaction
        )
        # The read goes on from the record being written, while it is written: the
        # answer waits for both, so an answered commit is durable, and a failed write
        # fails the poll (its messages are not answered).
        writing = self._writes.submit(store.write, sub, data, record.version)
        try:
            poll = self._read(sub, start_from, limit, transaction, metadata, data, record.version)
        except Exception as exc:
            # the commit is durable: answer it (a retry would carry a stale version)
            version = writing.result()
            return SubscriptionPoll(
                [], start_from, start_from, version, False, None, _failed(sub, exc)
            )
        version = writing.result()
        return poll if poll.version == version else replace(poll, version=version)

    def _read(  # noqa: PLR0917 - the read and the record it goes on from
        self,
        sub: SubscriptionId,
        start_from: MessageId,
        limit: int,
        transaction: Transaction | None,
        metadata: TopicMetadata,
        data: SubscriptionData,
        version: int,
    ) -> SubscriptionPoll:
        """Read from ``start_from`` as the record ``data`` (at ``version`` + 1) has it."""
        return read_subscription(
            self._subs,
            sub,
            start_from=start_from,
            limit=limit,
            transaction=transaction,
            current=(metadata, Versioned(data, version + 1)),
        )

    def _accepted(self, sub: SubscriptionId) -> tuple[TopicMetadata, Versioned, int]:
        """The topic, the record as the commits accepted so far leave it (one whose
        write is under way included), and the version durable."""
        with self._lock:
            pending = self._pending.get(sub)
        if pending is not None and not pending.write.done():
            metadata = self._subs.svc.get_topic(sub.topic)
            if pending.record.data.state.generation == metadata.generation:
                return metadata, pending.record, pending.durable
        metadata, record = self._subs.record(sub)
        return metadata, record, record.version

    def _read_later(  # noqa: PLR0917 - read's arguments
        self,
        store: StagingSubscriptionStore,
        sub: SubscriptionId,
        start_from: MessageId,
        limit: int,
        transaction: Transaction | None,
        commit_version: int,
    ) -> SubscriptionPoll:
        """``read`` with a commit the answer does not wait for (the module docstring).
        The read comes first: when it passed an entry at or after ``start_from``, that
        entry shows the move is not past the topic's last one (``checked_move``'s
        ``within_topic``), sparing a scan of the topic's end. A failed check then
        discards the read: nothing was changed."""
        metadata, record, durable = self._accepted(sub)
        if record.data.preferences.filter is not None:
            may_wait("a filtered read")  # before the commit is staged: see read_subscription
        read_error: Exception | None = None
        try:
            poll = self._read(
                sub, start_from, limit, transaction, metadata, record.data, record.version - 1
            )
        except Exception as exc:  # answered once the commit is accepted (below)
            read_error, poll = exc, None
        passed = poll is not None and (
            bool(poll.messages) or poll.held or poll.position > start_from
        )
        data = self._subs.checked_move(
            sub,
            metadata,
            record,
            start_from,
            version=commit_version,
            transaction=transaction,
            within_topic=passed,
        )
        staged = store.stage(sub, data, record.version)
        with self._lock:
            pending = self._pending.get(sub)
            if pending is not None and not pending.writing:  # its write takes this one
                pending.record, pending.staged = Versioned(data, staged.version), staged
                pending = None
            else:
                pending = _Pending(Versioned(data, staged.version), staged, durable)
                self._pending[sub] = pending
        if pending is not None:
            self._writes.submit(self._settle, store, sub, pending)
        if poll is None:  # the commit was accepted: answer it
            assert read_error is not None
            poll = SubscriptionPoll(
                [], start_from, start_from, staged.version, False, None, _failed(sub, read_error)
            )
        return replace(poll, version=staged.version, durable_version=durable)

    def _settle(
        self, store: StagingSubscriptionStore, sub: SubscriptionId, pending: _Pending
    ) -> None:
        """Wait for (or do) the write of the latest commit ``pending`` took,
        ``commit_later_ms`` after the first (at once when something waits for it); then
        forget it."""
        try:
            pending.hurry.wait(self._subs.svc.config.commit_later_ms / 1000)
            with self._lock:
                pending.writing = True
                staged = pending.staged
            pending.write.set_result(store.settle(staged))
        except BaseException as exc:
            log.warning("subscription %s: a commit answered before its write failed: %s", sub, exc)
            pending.write.set_exception(exc)
        finally:
            with self._lock:
                if self._pending.get(sub) is pending:
                    del self._pending[sub]

    def close(self) -> None:
        with self._lock:
            for pending in self._pending.values():
                pending.hurry.set()
        self._writes.shutdown(wait=True)
