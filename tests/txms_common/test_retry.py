"""The one back-off and the strategies on it."""

from __future__ import annotations

from itertools import islice

import pytest

from txms_common.retry import RetryNTimes, RetryWithBackoff, backoff


def test_backoff_grows_by_its_factor_up_to_its_cap() -> None:
    assert list(islice(backoff(0.1, 4.0), 4)) == pytest.approx([0.1, 0.4, 1.6, 6.4])
    assert list(islice(backoff(0.1, 4.0, cap_s=10.0), 6)) == pytest.approx(
        [0.1, 0.4, 1.6, 6.4, 10.0, 10.0]
    )
    assert list(islice(backoff(0.0, 2.0), 3)) == [0.0, 0.0, 0.0]


def test_backoff_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        next(backoff(-1.0))
    with pytest.raises(ValueError):
        next(backoff(0.1, 0.5))


def test_strategies() -> None:
    assert list(RetryWithBackoff().delays()) == pytest.approx([0.1, 0.4, 1.6, 6.4, 25.6])
    assert list(RetryWithBackoff(0.05, 2.0, 0.3).delays()) == pytest.approx([0.05, 0.1, 0.2])
    assert list(RetryNTimes(3).delays()) == [0.0, 0.0]
    assert list(RetryNTimes(1).delays()) == []
    for bad in ({"initial_s": 0.0}, {"factor": 0.5}):
        with pytest.raises(ValueError):
            RetryWithBackoff(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RetryNTimes(0)
