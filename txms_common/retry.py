"""Pauses between attempts: the one exponential back-off of the project, and Tephra's
client retry strategies built on it.

``backoff(initial_s, factor, cap_s)`` yields ``initial_s``, ``initial_s * factor``, ...,
each at most ``cap_s``, forever; a caller takes as many as it allows attempts
(``itertools.islice``) or restarts it after a success. A strategy yields the pauses
before each further attempt of one call; when it is exhausted the call fails.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import takewhile
from typing import Protocol

__all__ = ["RetryNTimes", "RetryStrategy", "RetryWithBackoff", "backoff"]


def backoff(initial_s: float, factor: float = 2.0, cap_s: float = math.inf) -> Iterator[float]:
    """``initial_s``, then ``factor`` times longer each time, never above ``cap_s``."""
    if initial_s < 0 or factor < 1:
        raise ValueError("initial_s must not be negative and factor at least 1")
    sleep = initial_s
    while True:
        yield min(sleep, cap_s)
        sleep *= factor


class RetryStrategy(Protocol):
    def delays(self) -> Iterator[float]:
        """Seconds to sleep before each further attempt (a fresh iterator per call)."""
        ...


class RetryWithBackoff:
    """Sleep ``initial_s``, then ``factor`` times longer each time, while the sleep stays
    below ``limit_s`` (Tephra's default: 0.1, 0.4, 1.6, 6.4, 25.6 s: six attempts)."""

    def __init__(self, initial_s: float = 0.1, factor: float = 4.0, limit_s: float = 30.0) -> None:
        if initial_s <= 0 or factor < 1:
            raise ValueError("initial_s must be positive and factor at least 1")
        self.initial_s = initial_s
        self.factor = factor
        self.limit_s = limit_s

    def delays(self) -> Iterator[float]:
        return takewhile(lambda sleep: sleep < self.limit_s, backoff(self.initial_s, self.factor))


class RetryNTimes:
    """``attempts`` attempts in all, without pausing."""

    def __init__(self, attempts: int = 2) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.attempts = attempts

    def delays(self) -> Iterator[float]:
        for _ in range(self.attempts - 1):
            yield 0.0
