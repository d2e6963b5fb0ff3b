"""The event loop the project's servers run on."""

from __future__ import annotations

import asyncio

__all__ = ["new_event_loop"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (it halves the loop's socket overhead), else asyncio's."""
    try:
        import uvloop  # noqa: PLC0415 - optional at run time
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
