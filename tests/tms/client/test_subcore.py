"""The sans-I/O core of the at-least-once subscribers (``tms.client.subcore.Cursor``):
when a commit rides on a poll, and what an answer, its loss, and a read after the loss
change — checked without a service or a clock."""

from __future__ import annotations

import pytest

from tms.client.subcore import Cursor
from tms.client.subscriptions import SubscriptionBatch, SubscriptionInfo
from tms.errors import StorageUnavailableError, TmsCodecError, TmsError
from tms.ids import MessageId
from tms.model import TopicId
from tms.subscription import Preferences, SubscriptionId

SUB = SubscriptionId(TopicId("ns", "t"), "s")


def mid(n: int) -> MessageId:
    return MessageId(n, 0)


def info(position: int, version: int) -> SubscriptionInfo:
    return SubscriptionInfo(SUB, version, mid(position), None, 0, 0, Preferences(), None)


def batch(position: int, version: int, error: TmsError | None = None) -> SubscriptionBatch:
    return SubscriptionBatch([], mid(0), mid(position), version, False, False, False, error)


def cursor_at(position: int, version: int, interval: float = 1.0) -> Cursor:
    cursor = Cursor(interval, now=0.0)
    cursor.reloaded(info(position, version), now=0.0)
    return cursor


def unsure(cursor: Cursor) -> MessageId | None:
    return cursor.unsure


def test_a_commit_is_due_when_something_new_is_processed_and_the_interval_passed() -> None:
    cursor = cursor_at(5, 1)
    assert not cursor.due(now=10.0)  # nothing new
    cursor.processed(mid(7))
    assert not cursor.due(now=0.5)
    assert cursor.due(now=1.0)
    cursor.processed(mid(6))  # never backwards
    assert cursor.done == mid(7)


def test_an_answered_poll_records_its_commit_and_version() -> None:
    cursor = cursor_at(5, 1)
    cursor.processed(mid(7))
    cursor.answered(batch(7, 2), due=True, now=3.0)
    assert (cursor.committed, cursor.version, cursor.committed_at) == (mid(7), 2, 3.0)


def test_a_failed_read_after_a_written_commit_keeps_the_commit() -> None:
    cursor = cursor_at(5, 1)
    cursor.processed(mid(7))
    cursor.answered(batch(7, 2, StorageUnavailableError("for now")), due=True, now=3.0)
    assert cursor.committed == mid(7)  # transient: the shell retries after a pause
    cursor.processed(mid(9))
    with pytest.raises(TmsCodecError):
        cursor.answered(batch(9, 3, TmsCodecError("for good")), due=True, now=4.0)
    assert (cursor.committed, cursor.version) == (mid(9), 3)


def test_after_an_unanswered_commit_a_read_tells_what_happened() -> None:
    cursor = cursor_at(5, 1)
    cursor.processed(mid(7))
    cursor.unanswered(due=True)
    assert unsure(cursor) == mid(7)
    # not written: the next poll commits it
    assert not cursor.recovered(info(5, 1), now=2.0)
    assert unsure(cursor) is None and cursor.committed == mid(5)
    # written: go on from it, under its version
    cursor.unanswered(due=True)
    assert not cursor.recovered(info(7, 2), now=2.0)
    assert (cursor.committed, cursor.version) == (mid(7), 2)
    # moved by someone else: the shell reloads
    cursor.processed(mid(8))
    cursor.unanswered(due=True)
    assert cursor.recovered(info(3, 4), now=2.0)


def test_an_unanswered_poll_without_a_commit_is_not_in_doubt() -> None:
    cursor = cursor_at(5, 1)
    cursor.processed(mid(7))
    cursor.unanswered(due=False)
    assert cursor.unsure is None
