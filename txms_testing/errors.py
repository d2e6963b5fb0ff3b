"""The harness's errors (the tree is drawn in ``txms_testing``)."""

from __future__ import annotations

__all__ = ["EngineError", "EngineUnavailableError"]


class EngineError(RuntimeError):
    """An engine could not be started, reached or stopped; the message carries its log."""


class EngineUnavailableError(EngineError):
    """The engine's package is not installed on this machine (``make system-deps``)."""
