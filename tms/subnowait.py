"""Reads of a subscription that must not wait (``Subscriptions.read`` called on an
event loop's thread: the binary protocol's small polls, ``tms.rpc.subs``).

Contract:

* ``not_waiting()`` — a context in which every step of a subscription read that could
  wait (for a commit's synced write, a write of its own, a question to the transaction
  manager, a long filtered scan) calls ``may_wait`` first, which raises ``WouldWait``
  there instead, **before** that step and before anything the read changes (a commit
  riding on it is checked and staged after every such step). The caller then does the
  read again where it may wait (a worker thread); nothing was done twice.
* Outside ``not_waiting()`` (every other caller), ``may_wait`` does nothing.
* ``WouldWait`` never leaves the code that entered ``not_waiting()``: it is a signal
  between the read and its caller, not an error of the service (not a ``TmsError``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["WouldWait", "may_wait", "not_waiting"]

_NOT_WAITING: ContextVar[bool] = ContextVar("tms_subscription_not_waiting", default=False)


class WouldWait(Exception):  # noqa: N818 - a signal, not an error (see the module docstring)
    """A read in ``not_waiting()`` reached a step that could wait (``str``: which)."""


def may_wait(step: str) -> None:
    """Raise ``WouldWait(step)`` inside ``not_waiting()``; else nothing."""
    if _NOT_WAITING.get():
        raise WouldWait(step)


@contextmanager
def not_waiting() -> Iterator[None]:
    """See the module docstring."""
    token = _NOT_WAITING.set(True)
    try:
        yield
    finally:
        _NOT_WAITING.reset(token)
