"""``Subscriber``: iterate a subscription's messages, committing as it goes
(at-least-once).

::

    with Subscriber(client, SubscriptionId(topic, "mailer")) as subscriber:
        for message in subscriber:
            send(message)          # processed once the loop asks for the next one

It starts at the subscription's position and long-polls for new messages. A message
counts as processed when the iteration asks for the one after it (leaving the loop
leaves the message it was on unprocessed, unless ``commit(through=message)`` says
otherwise); the position after the processed messages is committed at most every
``commit_interval_s`` (0: after every batch), riding on the next poll (``?commit``: one
request), and by ``commit()`` and ``close()``. After a crash, the messages after the
last commit are delivered again — at least once, never skipped. A poll whose commit
was written but whose read failed answers the commit (``SubscriptionBatch.read_error``):
a transient error is retried after a pause, another raised; a poll with a commit that
got no answer is followed by a read of the subscription, which tells whether the
commit was written — either way no retry meets ``BadVersionError`` for its own commit.
With ``commit_later``, a commit riding on a poll is answered before it is durable (the
service writes it a few milliseconds later, with the commits that follow:
``SubscriptionBatch.durable_version``); ``commit()`` and ``close()`` make the last one
durable, and one lost to a crash of the service meets ``BadVersionError`` at the next
commit: the subscriber goes on from the stored position (those messages come again).

A transactional subscription is read with transactions from ``tx_client`` (each used
for at most ``tx_refresh_s``, replaced at once when a read is held behind one that
finished; aborted when replaced: they write nothing). Its polls ask the service to
``reread``: a poll held behind a transaction in progress answers that transaction's
messages as soon as it commits, in the same request; the transaction is then replaced
before the next poll or commit (the answer went past what it sees). When a commit finds the
subscription changed (``BadVersionError``: a seek, or another consumer), the subscriber
reads it again and goes on from its stored position.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from tms.client.http import MessagingClient
from tms.client.subcore import Cursor
from tms.client.subscriptions import SubscriptionInfo
from tms.errors import BadVersionError, ServiceUnavailableError
from tms.ids import MessageId
from tms.model import Message
from tms.subscription import SubscriptionId, after
from txn.transaction import Transaction

__all__ = ["Subscriber"]

log = logging.getLogger(__name__)


class _TxSource(Protocol):
    def start_short(self, timeout_s: int | None = None) -> Transaction: ...

    def abort(self, tx: Transaction) -> None: ...


class Subscriber:
    """See the module docstring. One thread at a time."""

    def __init__(
        self,
        client: MessagingClient,
        subscription: SubscriptionId,
        *,
        tx_client: _TxSource | None = None,
        batch: int = 100,
        wait_ms: int = 10_000,
        commit_interval_s: float = 1.0,
        commit_later: bool = False,
        tx_refresh_s: float = 1.0,
        stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.subscription = subscription
        self._tx_client = tx_client
        self._batch = batch
        self._wait_ms = wait_ms
        self._commit_later = commit_later
        self._tx_refresh_s = tx_refresh_s
        self._stop = stop
        self._sleep = sleep
        self._monotonic = monotonic
        info = client.get_subscription(subscription)
        now = monotonic()
        self._cursor = Cursor(commit_interval_s, now)
        self._cursor.reloaded(info, now)
        self._through: MessageId | None = None  # processed too (settled into the cursor)
        self._tx: Transaction | None = None
        self._tx_started = 0.0
        self._read_with: Transaction | None = None  # the transaction of the last read
        self._fresh = False  # the last read saw more than _read_with: commit with a newer

    @property
    def position(self) -> MessageId:
        """Where processing stands: everything before it was processed."""
        self._settle()
        return self._cursor.done

    def _settle(self) -> None:
        if self._through is not None:
            self._cursor.processed(after(self._through))
            self._through = None

    @property
    def committed(self) -> MessageId:
        """The position last committed."""
        return self._cursor.committed

    def __iter__(self) -> Iterator[Message]:
        cursor = self._cursor
        delay = held_delay = 0.01
        while not self._stop():
            fresh = self._refresh_tx()
            self._settle()
            due = cursor.due(self._monotonic())
            try:
                if due and cursor.unsure is not None:
                    self._recover()
                    continue
                batch = self.client.poll_subscription(
                    self.subscription,
                    start=cursor.done,
                    limit=self._batch,
                    transaction=self._tx,
                    wait_ms=self._wait_ms,
                    commit_version=cursor.version if due else None,
                    reread=self._tx is not None,
                    commit_later=due and self._commit_later,
                )
            except ServiceUnavailableError:
                cursor.unanswered(due)  # with a commit: it may have been written
                self._sleep(delay)
                delay = min(delay * 4, 10.0)
                continue
            except BadVersionError:
                self._reload()
                continue
            cursor.answered(batch, due, self._monotonic())
            if batch.read_error is not None:  # the commit is done; the read failed for now
                self._sleep(delay)
                delay = min(delay * 4, 10.0)
                continue
            delay = 0.01
            self._read_with, self._fresh = self._tx, batch.fresh
            if batch.fresh:
                self._tx_started = -float("inf")  # read on with a newer transaction
            for message in batch.messages:
                yield message
                self._through = message.id  # asked for the next one: processed
            self._settle()
            cursor.processed(batch.position)
            if batch.held:
                self._tx_started = -float("inf")  # read on with a newer transaction
                if fresh and not batch.messages and not batch.held_finished:
                    self._sleep(held_delay)
                    held_delay = min(held_delay * 2, 1.0)
                    continue
            held_delay = 0.01

    def _refresh_tx(self) -> bool:
        if self._tx_client is None:
            return False
        if self._tx is not None and self._monotonic() - self._tx_started < self._tx_refresh_s:
            return False
        if self._tx is not None:
            with contextlib.suppress(Exception):
                self._tx_client.abort(self._tx)
        self._tx, self._tx_started = self._tx_client.start_short(), self._monotonic()
        return True

    def _recover(self) -> None:
        """After a poll that carried a commit got no answer: whether the commit was
        written (the record holds its position under a newer version: go on from it,
        no ``bad_version`` to meet), else as ``_reload`` when someone else moved it."""
        info = self.client.get_subscription(self.subscription)
        if self._cursor.recovered(info, self._monotonic()):
            self._reload(info)

    def _reload(self, info: SubscriptionInfo | None = None) -> None:
        if info is None:
            info = self.client.get_subscription(self.subscription)
        log.warning(
            "subscription %s changed (now at %s, version %d): going on from there",
            self.subscription,
            info.position.hex,
            info.version,
        )
        self._cursor.reloaded(info, self._monotonic())

    def commit(self, *, through: Message | None = None) -> None:
        """Commit the position after the processed messages now; ``through``: count this
        message (the one the loop is on) as processed too."""
        cursor = self._cursor
        self._settle()
        if through is not None:
            cursor.processed(after(through.id))
        if cursor.unsure is not None:
            self._recover()
        if cursor.settled():  # (a commit answered before it was durable is written again)
            return
        if self._fresh:  # the position is past what _read_with sees: use a newer one
            self._tx_started = -float("inf")
            self._refresh_tx()
            self._read_with, self._fresh = self._tx, False
        try:
            info = self.client.commit_subscription(
                self.subscription, cursor.done, cursor.version, transaction=self._read_with
            )
        except BadVersionError:
            self._reload()
            return
        cursor.commit_written(info, self._monotonic())

    def close(self) -> None:
        """Commit what was processed; end the read transaction."""
        try:
            self.commit()
        finally:
            if self._tx is not None and self._tx_client is not None:
                with contextlib.suppress(Exception):
                    self._tx_client.abort(self._tx)
                self._tx = None

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
