"""Raising the open-file limit when a server starts (``txn serve``, ``tms serve``, the
standalone stack).

Every client connection, LevelDB table file and log takes a file descriptor, and the
usual soft limit (1024) is far below what a busy server needs, while the hard limit the
administrator allows is usually much higher. A server raises its soft limit to the hard
limit once, at start, and says so (``OpenFileLimit.describe``) — as PostgreSQL and Kafka's
start scripts do.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

__all__ = ["OpenFileLimit", "raise_open_file_limit"]


@dataclass(frozen=True, slots=True)
class OpenFileLimit:
    before: int
    """The soft limit found at start."""
    after: int
    """The soft limit now."""
    hard: int
    error: str | None = None
    """Why the soft limit could not be raised (it stays ``before``)."""

    def describe(self) -> str:
        """One line for the server's log."""
        if self.error is not None:
            return (
                f"open-file limit stays at {self.before} (hard limit {_text(self.hard)}): "
                f"{self.error}"
            )
        if self.after == self.before:
            return f"open-file limit: {_text(self.after)} (the hard limit)"
        return f"open-file limit raised from {self.before} to {_text(self.after)} (the hard limit)"


def _text(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


def raise_open_file_limit() -> OpenFileLimit:
    """Set the soft ``RLIMIT_NOFILE`` to the hard one (POSIX; the project needs it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return OpenFileLimit(soft, soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        return OpenFileLimit(soft, soft, hard, str(exc))
    return OpenFileLimit(soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)
