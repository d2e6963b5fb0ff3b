"""Tephra's TransactionTest fixture: visibility at the three levels."""

from __future__ import annotations

import pytest

from txn.transaction import (
    ALL_VISIBLE_LATEST,
    NO_TX_IN_PROGRESS,
    Transaction,
    TransactionType,
    VisibilityLevel,
)

ALWAYS_HIDDEN = [150, 180, 210, 90, 110, 190, 201, 221, 231, 95, 120, 205, 215, 300]


def fixture_tx(checkpoints: tuple[int, ...], level: VisibilityLevel) -> Transaction:
    return Transaction(
        transaction_id=200,
        read_pointer=100,
        invalids=(90, 110, 190),
        in_progress=(95, 120, 150),
        first_short_in_progress=95,
        type=TransactionType.SHORT,
        write_pointer=checkpoints[-1] if checkpoints else 200,
        checkpoint_write_pointers=checkpoints,
        visibility_level=level,
    )


@pytest.mark.parametrize("level", [VisibilityLevel.SNAPSHOT, VisibilityLevel.SNAPSHOT_ALL])
def test_snapshot_visibility_with_checkpoints(level: VisibilityLevel) -> None:
    tx = fixture_tx((220, 250), level)
    for v in (80, 99, 100, 200, 220, 250):
        assert tx.is_visible(v), v
    for v in ALWAYS_HIDDEN:
        assert not tx.is_visible(v), v


def test_snapshot_exclude_current_hides_only_the_current_write_pointer() -> None:
    tx = fixture_tx((220, 250), VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT)
    assert tx.is_visible(200) and tx.is_visible(220)
    assert not tx.is_visible(250)
    for v in ALWAYS_HIDDEN:
        assert not tx.is_visible(v), v


@pytest.mark.parametrize(
    ("level", "own_visible"),
    [
        (VisibilityLevel.SNAPSHOT, True),
        (VisibilityLevel.SNAPSHOT_ALL, True),
        (VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT, False),
    ],
)
def test_visibility_without_checkpoints(level: VisibilityLevel, own_visible: bool) -> None:
    tx = fixture_tx((), level)
    assert tx.write_pointer == tx.transaction_id == 200
    assert tx.is_visible(200) is own_visible
    for v in (80, 99, 100):
        assert tx.is_visible(v)
    for v in ALWAYS_HIDDEN:
        assert not tx.is_visible(v), v


def test_visibility_upper_bound_and_excludes() -> None:
    tx = fixture_tx((), VisibilityLevel.SNAPSHOT)
    assert tx.visibility_upper_bound() == 94
    assert tx.first_in_progress == 95
    assert tx.is_in_progress(120) and not tx.is_in_progress(110)
    assert tx.is_excluded(110) and tx.is_excluded(120) and not tx.is_excluded(100)
    assert tx.has_excludes and tx.excludes_size == 6
    no_in_progress = Transaction(transaction_id=50, read_pointer=100, write_pointer=50)
    assert no_in_progress.visibility_upper_bound() == 49
    later = Transaction(transaction_id=500, read_pointer=100, write_pointer=500)
    assert later.visibility_upper_bound() == 100


def test_all_visible_latest_sees_everything_committed() -> None:
    assert ALL_VISIBLE_LATEST.is_visible(1)
    assert ALL_VISIBLE_LATEST.is_visible(NO_TX_IN_PROGRESS - 1)
    assert ALL_VISIBLE_LATEST.first_in_progress == NO_TX_IN_PROGRESS


def test_with_visibility_copies() -> None:
    tx = fixture_tx((220, 250), VisibilityLevel.SNAPSHOT)
    other = tx.with_visibility(VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT)
    assert other.visibility_level is VisibilityLevel.SNAPSHOT_EXCLUDE_CURRENT
    assert tx.visibility_level is VisibilityLevel.SNAPSHOT
    assert other.checkpoint_write_pointers == tx.checkpoint_write_pointers


def test_str_names_every_field_like_tephra() -> None:
    text = str(fixture_tx((), VisibilityLevel.SNAPSHOT))
    assert text.startswith("Transaction{readPointer: 100, transactionId: 200, writePointer: 200")
    assert "visibilityLevel: SNAPSHOT}" in text
